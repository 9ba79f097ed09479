//! The worker's parts: what one worker process holds and how it is made.
use super::persist;
use crate::broker::Broker;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

pub struct Worker {
    pub(super) ctx: persist::Ctx,
    /// Deliveries received and not settled yet (reported by [`Worker::heartbeat`]).
    pub(super) holding: Arc<AtomicUsize>,
    pub(super) hold_limit: Duration,
    /// Names this process in `worker_heartbeats`.
    pub(super) process: String,
    pub(super) broker: Arc<Broker>,
    pub(super) prefetch: u16,
    pub(super) batch: usize,
    /// Batches persisted at once, each in its own transaction ([`in_flight`]).
    pub(super) in_flight: usize,
    pub(super) payment_window: Duration,
    pub(super) metrics: Arc<crate::metrics::Metrics>,
}

impl Worker {
    pub fn new(
        ctx: persist::Ctx,
        broker: Arc<Broker>,
        settings: &crate::config::Settings,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        Self {
            ctx,
            holding: Arc::new(AtomicUsize::new(0)),
            hold_limit: settings.pipeline.worker_hold_limit,
            process: uuid::Uuid::new_v4().simple().to_string(),
            broker,
            prefetch: settings.pipeline.worker_prefetch,
            batch: settings.pipeline.worker_batch,
            in_flight: in_flight(settings.services.db_max_connections),
            payment_window: settings.sales.payment_window,
            metrics,
        }
    }
}

/// Batches a worker persists at once: four, fewer on a small pool. Each holds a
/// connection for its transaction and takes another, for a moment, for its
/// business numbers (the sequences share the worker's pool); the pool's other
/// users (heartbeat, sweeps, and in `all` the relay's intents and the epoch
/// guard) take one each for a moment. Keeping `2 × in flight + 1` connections
/// for this leaves the batches the connections they wait for, on any pool of
/// three or more.
fn in_flight(pool: u32) -> usize {
    ((pool as usize).saturating_sub(1) / 2).clamp(1, 4)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_small_pool_persists_fewer_batches_at_once() {
        let got: Vec<usize> = [1, 2, 3, 4, 5, 8, 9, 16].map(super::in_flight).to_vec();
        assert_eq!(got, vec![1, 1, 1, 1, 2, 3, 4, 4]);
    }
}
