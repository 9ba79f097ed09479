//! Ordering: placing an order (the hot path: one script in Redis per shard's
//! gate), the message that carries accepted orders from the outbox to the worker,
//! the relay from the outboxes to RabbitMQ ([`outbox`]), the worker that stores
//! them in Postgres ([`worker`]), and an order's life after (status, pay, cancel,
//! timeout).
pub mod gates;

pub mod lifecycle;
pub mod model;
pub mod outbox;
pub mod place;
pub mod refill_flights;
pub mod refusal;
pub mod replication;
pub mod status;
pub mod stored;
pub mod worker;

pub use model::{Accepted, Order, OrderMsg};
