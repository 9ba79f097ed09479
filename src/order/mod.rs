//! Orders: placing one (the hot path), the ID worker, the message that carries
//! accepted orders from the outbox to the worker, and status lookups.
pub mod gates;

pub mod lifecycle;
pub mod model;
pub mod place;
pub mod refill_flights;
pub mod refusal;
pub mod replication;
pub mod status;
pub mod stored;

pub use model::{Accepted, Order, OrderMsg};
