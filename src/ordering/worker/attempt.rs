//! One batch's way into Postgres: retried while the failure is passing, up to the
//! hold limit; and what it counts.
use super::persist::{self, Outcome};
use super::setup::Worker;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

impl Worker {
    /// Retries transient failures with backoff until success, a permanent error,
    /// the hold limit, or `stop`.
    pub(super) async fn persist_retrying(
        &self,
        orders: &[crate::ordering::OrderMsg],
        intents: &[i64],
        stop: &CancellationToken,
    ) -> Persisted {
        let mut backoff = Duration::from_millis(50);
        let started = Instant::now();
        loop {
            let timer = self.metrics.worker_persist_seconds.start_timer();
            let result = persist::persist_relayed(&self.ctx, orders, intents).await;
            timer.observe_duration();
            match result {
                Err(e) if e.is_transient() && started.elapsed() + backoff > self.hold_limit => {
                    return Persisted::Release(e);
                }
                Err(e) if e.is_transient() => {
                    tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "persisting orders failed; retrying");
                    tokio::select! {
                        _ = stop.cancelled() => return Persisted::Stopping,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
                Err(e) => return Persisted::Refused(e),
                Ok(outcome) => return Persisted::Done(outcome),
            }
        }
    }

    pub(super) fn count(&self, o: Outcome) {
        self.metrics
            .worker_batch_orders
            .observe((o.created + o.duplicates + o.failed) as f64);
        // An order stored `failed` is one Redis admitted and its shopper was told
        // was accepted: an incident, always (each also logged, naming the order,
        // by `persist`).
        for (kind, n) in [
            ("id_collision", o.id_collisions),
            ("number_collision", o.number_collisions),
            ("failed", o.failed),
        ] {
            if n > 0 {
                self.metrics
                    .worker_incidents
                    .with_label_values(&[kind])
                    .inc_by(n as u64);
            }
        }
        for (result, n) in [
            ("created", o.created),
            ("duplicate", o.duplicates),
            ("failed", o.failed),
        ] {
            if n > 0 {
                self.metrics
                    .orders_persisted
                    .with_label_values(&[result])
                    .inc_by(n as u64);
            }
        }
    }
}

/// How persisting a batch ended.
pub(super) enum Persisted {
    Done(Outcome),
    /// The database refuses it as such (retrying will not help).
    Refused(persist::PersistError),
    /// Still failing at the hold limit: hand the messages back.
    Release(persist::PersistError),
    Stopping,
}
