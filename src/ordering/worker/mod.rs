//! The order worker: consumes order batches from RabbitMQ with manual acks and a
//! prefetch window, persists what has arrived in one transaction
//! ([`persist::persist`]), and acknowledges only after the commit.
//!
//! - A message that is not an order batch (poison) is rejected without requeue and
//!   dead-lettered at once; the worker reads the dead-letter queue too and keeps such
//!   a message in Postgres (`dead_letters`) for people to read.
//! - While Postgres (or Redis, for business numbers) is down the worker retries the
//!   same batch with backoff, but holds it at most `hold_limit`: then it hands the
//!   messages back to the queue and reconnects later, so that no batch sits unseen in
//!   a worker's hands (what it holds is reported: [`Worker::heartbeat`]).
//! - A batch the database refuses as such is retried message by message; a message
//!   that is still refused has its orders stored `failed` with the reason (an
//!   incident, counted and logged), never dropped.
//! - An order message that RabbitMQ dead-lettered anyway (its delivery limit ran out
//!   through crashes and hand-backs) is persisted from the dead-letter queue like any
//!   other: no acknowledged order ends there unaccounted for.
mod attempt;
mod consume;
mod dead;
mod heartbeat;
pub mod persist;
mod setup;
pub mod timeout;

pub use heartbeat::{last as last_heartbeats, Heartbeat};
pub use setup::Worker;

/// How often a worker reports what it holds ([`Worker::heartbeat`]).
pub const HEARTBEAT_EVERY: std::time::Duration = std::time::Duration::from_millis(250);
