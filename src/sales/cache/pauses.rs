//! [`watch_pauses`]: the task that catches up with pauses and resumes whose event
//! did not arrive, by reading the paused sales from Postgres every
//! [`PAUSE_CHECK_EVERY`].
use super::store::VoucherCache;
use sqlx::PgPool;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often every instance compares its paused sales with Postgres's.
pub const PAUSE_CHECK_EVERY: Duration = Duration::from_millis(500);

/// Keeps every sale's `paused` in `cache` within [`PAUSE_CHECK_EVERY`] of
/// Postgres's until `stop`, whether or not the pub/sub event arrived.
pub async fn watch_pauses(cache: Arc<VoucherCache>, pg: PgPool, stop: CancellationToken) {
    let mut every = tokio::time::interval(PAUSE_CHECK_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = every.tick() => match cache.sync_pauses(&pg).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(vouchers = n, "caught up with pauses whose event did not arrive"),
                // Postgres away: the next tick tries again (the cache keeps what it knows).
                Err(e) => tracing::debug!(error = %format!("{e:#}"), "pause check failed"),
            },
        }
    }
}
