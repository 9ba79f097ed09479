//! [`RefillFlights`]: single flight for the refills of a sharded sale's dry shard, per
//! sale in this process (`place.rs` runs them).
use crate::sales::refill::Refill;
use std::sync::Arc;

/// Single flight for refills, per sale in this process: a request that finds its
/// shard dry notes how many refills of the sale have started, takes the sale's
/// lock, and takes the answer of a refill that started after that (it read every
/// shard after this request's shard was found dry) instead of running its own.
/// So at a sell-out one refill per process answers every waiting request, and a
/// "sold out" is never older than the request it answers.
#[derive(Default)]
pub struct RefillFlights {
    map: std::sync::Mutex<std::collections::HashMap<i64, Arc<Mover>>>,
}

#[derive(Default)]
pub(super) struct Mover {
    /// The last refill's number and answer.
    pub(super) last: tokio::sync::Mutex<(u64, Option<Refill>)>,
    /// Refills started (under `last`'s lock).
    pub(super) started: std::sync::atomic::AtomicU64,
}

impl RefillFlights {
    pub(super) fn get(&self, voucher: i64) -> Arc<Mover> {
        self.map
            .lock()
            .expect("refill_flights poisoned")
            .entry(voucher)
            .or_default()
            .clone()
    }
}
