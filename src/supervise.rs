//! The loop every long-running connection task shares (relay, worker, timeout
//! consumer, voucher-cache follower): run, and after a failure wait with
//! exponential backoff (100 ms doubling to 5 s) and run again, until stopped. A run
//! that lasted [`HEALTHY_RUN`] or more counts as healthy: the next failure starts
//! the backoff from the beginning again.
use std::future::Future;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A run at least this long resets the backoff.
pub const HEALTHY_RUN: Duration = Duration::from_secs(30);

/// Runs `connected` until it returns `Ok` (it stopped cleanly) or `stop` is cancelled.
pub async fn supervise<F, Fut>(what: &str, stop: &CancellationToken, mut connected: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let mut backoff = FIRST_BACKOFF;
    while !stop.is_cancelled() {
        let started = Instant::now();
        match connected().await {
            Ok(()) => return,
            Err(e) => tracing::warn!(task = what, error = %format!("{e:#}"), "interrupted; reconnecting"),
        }
        backoff = next_backoff(backoff, started.elapsed());
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
    }
}

/// The wait after a run that failed after `ran`, given the previous wait.
fn next_backoff(previous: Duration, ran: Duration) -> Duration {
    if ran >= HEALTHY_RUN {
        FIRST_BACKOFF
    } else {
        (previous * 2).min(MAX_BACKOFF)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap_and_resets_after_a_healthy_run() {
        let mut b = FIRST_BACKOFF;
        for _ in 0..10 {
            b = next_backoff(b, Duration::from_millis(10));
        }
        assert_eq!(b, MAX_BACKOFF);
        assert_eq!(next_backoff(b, HEALTHY_RUN), FIRST_BACKOFF);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_task_is_retried_until_stopped() {
        let stop = CancellationToken::new();
        let runs = std::sync::atomic::AtomicU32::new(0);
        let stopper = stop.clone();
        supervise("test", &stop, || {
            let n = runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            if n == 3 {
                stopper.cancel();
            }
            async { anyhow::bail!("down") }
        })
        .await;
        assert_eq!(runs.load(std::sync::atomic::Ordering::Relaxed), 3);
    }
}
