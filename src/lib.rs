//! seckill: a flash-sale voucher ordering backend.
//!
//! The order path, top to bottom:
//! - [`ordering::place`]: the handler checks the sale window from the in-process
//!   [`sales::cache`], then runs one Lua script (`lua/reserve.lua`) that takes stock,
//!   marks the shopper and appends the order to the voucher's outbox stream atomically
//!   (one call for every order waiting for the same shard: [`ordering::gates`]);
//! - [`ordering::outbox`]: the relay moves outbox entries to RabbitMQ with publisher confirms,
//!   a batch of orders per message, and acknowledges in Redis only what was confirmed;
//! - [`ordering::worker`]: consumes those messages and writes orders and stock decrements to
//!   Postgres in one transaction per batch, idempotently.
//!
//! # Layout
//!
//! Four layers. A file imports from its own layer and the ones below it, never up;
//! a business area imports only the areas listed below it (the back-up arrows not
//! undone yet are listed in the check, a list that may only shrink);
//! a file of one business area uses another area only through that area's root
//! module or its `pub mod` children, and theirs (its interface), never the files
//! behind them; and no files import each other in a circle, a re-export counting
//! as an import. `scripts/import_cycles.py` (run by the test command) reads the
//! lines below and fails on any of the four. Each area owns its Postgres tables:
//! only its own files hold SQL on them (`scripts/sql_owners.py` names each
//! table's owner, and the owners of each Redis key and RabbitMQ name), and
//! another area calls it, or takes the part of a statement it hands out where one
//! statement must read both.
//!
//! The edges run the process and take requests:
//! - edge process: `cli`: the commands of the contract (`all`, `serve`, `worker`,
//!   `migrate`, `token`, ...).
//! - edge process: `app`: one process built and stopped: connections, the
//!   services, the background tasks, the HTTP server.
//! - edge http: `http`: routes and handlers (each calls services), the contract's
//!   error body, authentication, rate limits, health, the OpenAPI document.
//!
//! Above the areas, what reads several of them:
//! - report reports: `reports`: a sale's books, the unbalanced-sales gauge, the
//!   admin console's live numbers.
//!
//! The business areas, from the top down (an area imports only those below it):
//! - area ordering: `ordering`: placing an order (one script in
//!   Redis), the relay from the outboxes to RabbitMQ, the worker that stores
//!   orders in Postgres, and an order's life after (status, pay, cancel, timeout).
//! - area sales: `sales`: vouchers, their window, stock and shards, top-ups,
//!   pauses, the in-process cache the order path reads.
//! - area admission: `admission`: fair admission: a sale's waiting room or raffle,
//!   admission tokens, proofs of work.
//! - area recovery: `recovery`: Redis losing state or going back in time, caught
//!   shard by shard; the one interface ([`recovery::Recovery`]) every writer
//!   respects, and the repairs.
//! - area numbers: `numbers`: daily business numbers, order ids in blocks, and the ranges reserved in
//!   Postgres behind them and behind order ids.
//!
//! What every area shares:
//! - base infrastructure: `redis_conn`, `broker`, `locks`, `keys`, `config`,
//!   `metrics`, `telemetry`, `supervise`: Redis (one node or a cluster),
//!   RabbitMQ, distributed locks, every key and queue name, the settings, metrics,
//!   the reconnect loop.
//! - base values: `clock`, `clock_skew`, `id`, `validate`: the one source of
//!   "now" and how far it is from Postgres's, ids as JSON strings and the id
//!   types the services take ([`id::VoucherId`], [`id::UserId`], [`id::OrderId`],
//!   and [`id::OrderKey`], what tells one order from another), request bodies
//!   checked field by field.
pub mod admission;
pub mod app;
pub mod broker;
pub mod cli;
pub mod clock;
pub mod clock_skew;
pub mod config;
pub mod http;
pub mod id;
pub mod keys;
pub mod locks;
pub mod metrics;
pub mod numbers;
pub mod ordering;
pub mod recovery;
pub mod redis_conn;
pub mod reports;
pub mod sales;
pub mod supervise;
pub mod telemetry;
pub mod validate;
