//! Background jobs that must run on one instance at a time (today `order-recovery`:
//! unfinished stock returns and top-ups, unpaid orders whose timeout was lost): the
//! job runs while its instance holds a watchdog-kept lock; when that instance dies,
//! the lease runs out and another instance takes over within one lease.
use super::LockService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Runs `job` every `every` on whichever instance holds the lock `name`, until `stop`.
pub async fn run<F, Fut>(locks: Arc<LockService>, name: &str, every: Duration, stop: CancellationToken, mut job: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let lock = format!("singleton:{name}");
    while !stop.is_cancelled() {
        let owner = locks.owner();
        let attempt = tokio::select! {
            _ = stop.cancelled() => return,
            g = owner.try_lock(&lock, locks.watchdog_lease(), None) => g,
        };
        let guard = match attempt {
            Ok(Some(g)) => g,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(job = name, error = %format!("{e:#}"), "could not contend for a singleton job");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                continue;
            }
        };
        tracing::info!(job = name, "running singleton job on this instance");
        while !stop.is_cancelled() && !guard.is_lost() {
            if let Err(e) = job().await {
                tracing::warn!(job = name, error = %format!("{e:#}"), "singleton job round failed");
            }
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = tokio::time::sleep(every) => {}
            }
        }
        let _ = guard.release().await;
    }
}
