//! Every Redis key and RabbitMQ name, under the deployment's namespace.
//!
//! All keys of one shard of a voucher share one hash tag so that the order script,
//! which touches several of them, runs unchanged on Redis Cluster: shard 0 (every
//! sale with `stock_shards` 1) uses `{v<id>}`, shard k >= 1 `{v<id>.<k>.<salt>}`
//! ([`shard_tag`]).
mod hash_slot;
mod names;
mod shard;
#[cfg(test)]
mod tests;

pub use hash_slot::slot;
pub use names::Keys;
pub use shard::{shard_of, shard_tag, split};

/// The consumer group every relay reads outbox streams with.
pub const RELAY_GROUP: &str = "relay";
