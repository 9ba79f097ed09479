//! Per-user serialization: a shopper's mutating requests (pay, cancel, …)
//! run one at a time across all instances. A request that cannot take the shopper's
//! lock within the configured wait fails with [`Busy`] (409 `request_in_progress`
//! at the HTTP edge).
use super::LockService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// The shopper's previous request still held the lock when the wait ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("another request of this shopper is in progress")]
pub struct Busy;

#[derive(Clone)]
pub struct UserSerializer {
    locks: Arc<LockService>,
    wait: Duration,
}

impl UserSerializer {
    pub fn new(locks: Arc<LockService>, wait: Duration) -> Self {
        Self { locks, wait }
    }

    /// Runs `op` while holding the shopper's lock. Fails with [`Busy`] when the lock
    /// does not come within the wait, and with the lock's own failures (Redis).
    pub async fn run<T, E>(&self, user_id: i64, op: impl Future<Output = Result<T, E>>) -> Result<T, E>
    where
        E: From<Busy> + From<anyhow::Error>,
    {
        let name = format!("user:{user_id}");
        let guard = self.locks.owner().try_lock(&name, self.wait, None).await?.ok_or(Busy)?;
        let result = op.await;
        if let Err(e) = guard.release().await? {
            tracing::warn!(user_id, error = %e, "a per-user lock was not held until the end of its request");
        }
        result
    }
}
