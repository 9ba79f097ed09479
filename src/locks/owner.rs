//! Holders and held locks: taking (with a wait), the watchdog that keeps a lease,
//! and release.
use super::service::{LockService, ReleaseError, ACQUIRE, MAX_NAP, RELEASE, RENEW};
use anyhow::{Context, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// One holder identity. Cheap to clone; clones are the same owner (reentrancy).
#[derive(Clone)]
pub struct Owner {
    pub(super) svc: Arc<LockService>,
    pub(super) id: String,
}

/// A held lock. Release it with [`LockGuard::release`]; a guard dropped without it
/// is released in the background.
pub struct LockGuard {
    owner: Owner,
    name: String,
    /// This grant's fencing token.
    pub fence: i64,
    watchdog: Option<CancellationToken>,
    lost: Arc<AtomicBool>,
    released: bool,
}

impl Owner {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Waits until the lock is granted; a watchdog keeps it.
    pub async fn lock(&self, name: &str) -> Result<LockGuard> {
        loop {
            if let Some(g) = self.try_lock(name, Duration::from_secs(3600), None).await? {
                return Ok(g);
            }
        }
    }

    /// Waits at most `wait`. With `lease` the lock expires after it unless released;
    /// without, a watchdog renews it every third of the service's watchdog lease.
    pub async fn try_lock(&self, name: &str, wait: Duration, lease: Option<Duration>) -> Result<Option<LockGuard>> {
        let deadline = Instant::now() + wait;
        let lease_ms = lease.unwrap_or(self.svc.watchdog_lease).as_millis().max(1) as u64;
        let notify = self.svc.waiter(name);
        loop {
            // Registered (at the back of the lock's queue of local waiters) before the
            // attempt, so a release between the attempt and the wait still wakes us;
            // one we were given but do not need (the attempt won) is passed on to the
            // next waiter when this is dropped.
            let woken = notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            match self.attempt(name, lease_ms).await? {
                Ok(fence) => {
                    let lost = Arc::new(AtomicBool::new(false));
                    let watchdog = lease.is_none().then(|| self.watchdog(name, lease_ms, lost.clone()));
                    return Ok(Some(LockGuard {
                        owner: self.clone(),
                        name: name.to_owned(),
                        fence,
                        watchdog,
                        lost,
                        released: false,
                    }));
                }
                Err(pttl) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(None);
                    }
                    let holder_left = Duration::from_millis(pttl.max(1) as u64);
                    let nap = left.min(holder_left).min(MAX_NAP);
                    // Woken (one waiter per release) or not, try again: a wake-up
                    // only shortens the nap.
                    if tokio::time::timeout(nap, woken).await.is_ok() {
                        self.svc.wakeups.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }

    /// One script call: Ok(fence) if granted, Err(pttl) if held by another.
    async fn attempt(&self, name: &str, lease_ms: u64) -> Result<Result<i64, i64>> {
        self.svc.attempts.fetch_add(1, Ordering::Relaxed);
        // A new token is above every token of this lock this process has seen: a
        // Redis that went back in time cannot hand it one again (lock_acquire.lua).
        let seen = self.svc.tokens_seen(name);
        let mut conn = self.svc.redis.conn().await?;
        let (granted, n): (i64, i64) = ACQUIRE
            .key(self.svc.keys.lock(name))
            .key(self.svc.keys.lock_fence(name))
            .arg(&self.id)
            .arg(lease_ms)
            .arg(seen)
            .invoke_async(&mut conn)
            .await
            .context("lock_acquire.lua")?;
        if granted == 1 {
            self.svc.saw_token(name, n);
        }
        Ok(if granted == 1 { Ok(n) } else { Err(n) })
    }

    fn watchdog(&self, name: &str, lease_ms: u64, lost: Arc<AtomicBool>) -> CancellationToken {
        // A child of the process's token: a process that stops (or dies) stops renewing.
        let stop = self.svc.stop.child_token();
        let (owner, name, stop2) = (self.clone(), name.to_owned(), stop.clone());
        self.svc.tasks.spawn_on(async move {
            let every = Duration::from_millis(lease_ms / 3);
            loop {
                tokio::select! {
                    _ = stop2.cancelled() => return,
                    _ = tokio::time::sleep(every) => {}
                }
                match owner.renew(&name, lease_ms).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::error!(lock = %name, "lock lost before release (lease ran out); stopping its watchdog");
                        lost.store(true, Ordering::Release);
                        return;
                    }
                    // Redis unreachable: keep trying; the lease may still be saved.
                    Err(e) => tracing::warn!(lock = %name, error = %format!("{e:#}"), "renewing a lock failed"),
                }
            }
        }, &self.svc.main_runtime);
        stop
    }

    async fn renew(&self, name: &str, lease_ms: u64) -> Result<bool> {
        let lock = self.svc.keys.lock(name);
        let mut conn = self.svc.redis.conn().await?;
        let renewed: i64 = RENEW
            .key(lock)
            .arg(&self.id)
            .arg(lease_ms)
            .invoke_async(&mut conn)
            .await
            .context("lock_renew.lua")?;
        Ok(renewed == 1)
    }

    /// Releases one hold of `name` as this owner.
    pub async fn unlock(&self, name: &str) -> Result<std::result::Result<i64, ReleaseError>> {
        let lock = self.svc.keys.lock(name);
        let mut conn = self.svc.redis.conn().await?;
        let left: i64 = RELEASE
            .key(lock)
            .arg(&self.id)
            .arg(self.svc.keys.lock_released())
            .arg(name)
            .invoke_async(&mut conn)
            .await
            .context("lock_release.lua")?;
        Ok(match left {
            -1 => Err(ReleaseError::Expired),
            -2 => Err(ReleaseError::NotOwner),
            n => Ok(n),
        })
    }
}

impl LockGuard {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True once the watchdog found the lock gone (only for watchdog-kept locks).
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Releases this hold. Reports a lease that ran out or a lock taken by another.
    pub async fn release(mut self) -> Result<std::result::Result<(), ReleaseError>> {
        self.released = true;
        if let Some(w) = self.watchdog.take() {
            w.cancel();
        }
        Ok(self.owner.unlock(&self.name).await?.map(|_| ()))
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(w) = self.watchdog.take() {
            w.cancel();
        }
        if !self.released {
            let (owner, name) = (self.owner.clone(), self.name.clone());
            self.owner.svc.tasks.spawn_on(
                async move {
                    let _ = owner.unlock(&name).await;
                },
                &self.owner.svc.main_runtime,
            );
        }
    }
}

impl LockService {
    /// A new holder identity: give one to each task that takes locks.
    pub fn owner(self: &Arc<Self>) -> Owner {
        Owner {
            svc: self.clone(),
            id: format!("{}:{}", self.instance, uuid::Uuid::new_v4().simple()),
        }
    }
}
