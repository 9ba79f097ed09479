//! seckill: a flash-sale voucher ordering backend.
//!
//! The order path, top to bottom:
//! - [`order::place`]: the handler checks the sale window from the in-process
//!   [`voucher::cache`], then runs one Lua script (`lua/reserve.lua`) that takes stock,
//!   marks the shopper and appends the order to the voucher's outbox stream atomically
//!   (one call for every order waiting for the same shard: [`order::reserve`]);
//! - [`outbox`]: the relay moves outbox entries to RabbitMQ with publisher confirms,
//!   a batch of orders per message, and acknowledges in Redis only what was confirmed;
//! - [`worker`]: consumes those messages and writes orders and stock decrements to
//!   Postgres in one transaction per batch, idempotently.
//!
//! Around it: [`config`] (typed settings), [`app`] (wiring and background tasks),
//! [`http`] (error body and the mapping of domain errors to it, auth, health),
//! [`id`] (64-bit ids as JSON strings), [`validate`] (request bodies checked field
//! by field), [`voucher`] (admin and public routes, cache),
//! [`sequence`] (daily business numbers, and the ranges reserved in Postgres behind
//! them and order ids), [`recovery`] (Redis losing state or going back in time,
//! caught shard by shard and repaired sale by sale),
//! [`broker`] (RabbitMQ topology and connections), [`clock`] (the one source of "now")
//! and [`clock_skew`] (how far it is from Postgres's), [`admit`] (fair admission:
//! a sale's waiting room or raffle, admission tokens, proofs of work).
//!
//! Every module with its one job, top to bottom (imports only point down):
//! `docs/ARCHITECTURE.md`, "The house".
pub mod admit;
pub mod app;
pub mod broker;
pub mod cli;
pub mod clock;
pub mod clock_skew;
pub mod config;
pub mod http;
pub mod id;
pub mod keys;
pub mod lock;
pub mod metrics;
pub mod order;
pub mod outbox;
pub mod recovery;
pub mod redis_conn;
pub mod sequence;
pub mod supervise;
pub mod telemetry;
pub mod validate;
pub mod voucher;
pub mod worker;
