//! The loop every long-running connection task shares (relay, worker, timeout
//! consumer, voucher-cache follower): run, and after a failure wait with
//! exponential backoff (100 ms doubling to 5 s) and run again, until stopped.
use std::future::Future;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Runs `connected` until it returns `Ok` (it stopped cleanly) or `stop` is cancelled.
pub async fn supervise<F, Fut>(what: &str, stop: &CancellationToken, mut connected: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let mut backoff = Duration::from_millis(100);
    while !stop.is_cancelled() {
        match connected().await {
            Ok(()) => return,
            Err(e) => tracing::warn!(task = what, error = %format!("{e:#}"), "interrupted; reconnecting"),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}
