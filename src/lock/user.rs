//! Per-user serialization (seed 004): a shopper's mutating requests (pay, cancel, …)
//! run one at a time across all instances. A request that cannot take the shopper's
//! lock within the configured wait gets 409 `request_in_progress`.
use super::LockService;
use crate::http::ApiError;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone)]
pub struct UserSerializer {
    locks: Arc<LockService>,
    wait: Duration,
}

impl UserSerializer {
    pub fn new(locks: Arc<LockService>, wait: Duration) -> Self {
        Self { locks, wait }
    }

    /// Runs `op` while holding the shopper's lock.
    pub async fn run<T>(&self, user_id: i64, op: impl Future<Output = Result<T, ApiError>>) -> Result<T, ApiError> {
        let name = format!("user:{user_id}");
        let guard = self
            .locks
            .owner()
            .try_lock(&name, self.wait, None)
            .await?
            .ok_or_else(|| {
                ApiError::conflict(
                    "request_in_progress",
                    "another request of yours is in progress; retry shortly",
                )
            })?;
        let result = op.await;
        if let Err(e) = guard.release().await? {
            tracing::warn!(user_id, error = %e, "a per-user lock was not held until the end of its request");
        }
        result
    }
}
