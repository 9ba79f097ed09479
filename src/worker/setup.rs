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
            hold_limit: settings.worker_hold_limit,
            process: uuid::Uuid::new_v4().simple().to_string(),
            broker,
            prefetch: settings.worker_prefetch,
            batch: settings.worker_batch,
            payment_window: settings.payment_window,
            metrics,
        }
    }
}
