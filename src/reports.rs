//! Reports that read several areas, above them: the books of a flash sale (`GET
//! /api/v1/admin/vouchers/{id}/audit`), the `seckill_sales_unbalanced` gauge, and
//! the live numbers the admin console polls. They read each area through its
//! interface (its tables and keys stay its own).
//!
//! Every unit ever put on sale (`stock`, Postgres's `total_stock`) is, at any
//! moment, in exactly one of three places:
//!
//! - still on sale in Redis (the stock key; for a sharded sale, a shard's stock key
//!   or in transit between two shards: given by one, not yet taken by the other);
//! - in an order Redis admitted that has not reached Postgres yet (in the outbox,
//!   in RabbitMQ, in a worker's hands): the orders Redis ever admitted (its
//!   `admitted` counter, plus the `orders` hash an older version kept) minus the
//!   orders Postgres holds, whatever their status;
//! - in a live order in Postgres (`created` or `paid`).
//!
//! A cancelled order's unit went back to Redis (its stock key and its `returned`
//! set). Postgres keeps its own books as well: its `stock` is `total_stock` minus
//! the live orders.
//!
//! Two facts leave the books unbalanced even when those sums agree, because they
//! can agree for the wrong reason:
//! - an order in Postgres that Redis never admitted (`in_flight.orders` below 0):
//!   Redis went back in time and lost orders it had admitted, its stock with them,
//!   so it would sell their units again; the units sum balances all the same (the
//!   lost orders' units are "on sale" in Redis and "live" in Postgres);
//! - a `failed` order: an incident. A repair rebuilds Redis from Postgres, after
//!   which the units sum balances; the failed order must still show.
//!
//! The Postgres half is read in one snapshot, then the Redis half in one `MULTI`
//! per shard (a sharded sale's shards are read until two reads agree on every
//! move: [`crate::sales::shards::snapshot`]). Postgres first: every order Postgres
//! holds was admitted by Redis before it was read, and Redis's count of admitted
//! orders only grows, so a healthy sale never shows fewer admitted orders than
//! Postgres holds. Orders admitted or persisted between the two reads move a unit
//! between two places the same reads see, so they never unbalance the books. A cancellation or
//! a top-up (Postgres and Redis written one after the other) can fall between the
//! two reads: one audit may then be off by that unit, the next is not. The gauge
//! therefore counts a sale only when two consecutive audits, `SECKILL_AUDIT_INTERVAL_MS`
//! (5 s) apart, found it unbalanced.
mod books;
mod service;
pub mod view;
mod watch;

pub use books::{audit, books, Audit, Checks, InFlight, Lookup, PostgresBooks, RedisBooks};
pub use service::{Reports, ReportsParts};
pub use watch::{Streak, Watch};

#[cfg(test)]
mod tests;
