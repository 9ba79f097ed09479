//! The relay: moves accepted orders from the vouchers' outbox streams in Redis to
//! RabbitMQ, a batch of orders per message, and acknowledges in Redis only what
//! RabbitMQ confirmed.
//!
//! Every relay reads with the consumer group `relay` under its own consumer name.
//! An entry it read but could not publish stays in its pending list and is published
//! again (first its own, on every (re)connect; then entries other relays left pending
//! longer than the claim timeout, taken over with XAUTOCLAIM). A message published
//! twice is harmless: the worker inserts by order id.
mod backlog;
pub mod entry;
pub mod format;
mod lag;
pub mod relay;

pub use backlog::backlog;
pub use entry::read_outbox;
pub use lag::{relay_state, RelayState, ShardRelay};
pub use relay::intent::{orders_of_sale as intent_orders_of_sale, record as record_intent, sweep as sweep_intents};
pub use relay::read_before_repair::{settle_gone, Settled};
