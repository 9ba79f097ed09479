//! Distributed locks with the semantics Redisson's `RLock` users know, plus fencing
//! tokens.
//!
//! - An [`Owner`] is one holder identity (instance + task), never a thread id; an
//!   owner may take a lock it holds again (reentrant) and it is free after as many
//!   releases.
//! - [`Owner::lock`] waits as long as it takes; [`Owner::try_lock`] waits at most
//!   `wait`. Without an explicit lease a watchdog renews the lease every third of it
//!   while the guard lives; a holder that dies loses the lock when the lease runs out.
//! - Release is a compare-and-delete in Lua: a non-owner's release changes nothing and
//!   is reported, as is the release of a lock whose lease ran out.
//! - Every grant carries a fencing token that grows with each grant of that lock;
//!   [`fence`] offers writes (Postgres row, Redis key) that refuse older tokens.
//! - Waiting does not spin: a release publishes the lock's name, one subscription per
//!   process wakes the local waiters, and a waiter otherwise sleeps until the
//!   holder's lease would run out.
pub mod fence;
pub mod singleton;
pub mod user;

use crate::keys::Keys;
use crate::redis_conn::Redis;
use anyhow::{Context, Result};
use futures::StreamExt;
use redis::Script;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/lock_acquire.lua")));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/lock_release.lua")));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/lock_renew.lua")));

/// Longest a waiter sleeps between attempts when no release arrives (a lost
/// pub/sub message costs at most this).
const MAX_NAP: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReleaseError {
    #[error("the lock's lease had run out")]
    Expired,
    #[error("the lock is held by another owner")]
    NotOwner,
}

/// The locks of one process.
pub struct LockService {
    redis: Redis,
    keys: Keys,
    instance: String,
    waiters: Mutex<HashMap<String, Weak<Notify>>>,
    /// The lease a watchdog keeps renewing (`SECKILL_LOCK_LEASE_MS`, 30 s by
    /// default as in Redisson).
    watchdog_lease: Duration,
    /// Background work (watchdogs, the subscription) runs on the main runtime.
    home: tokio::runtime::Handle,
    /// Stops the subscription and every watchdog of this process.
    stop: CancellationToken,
    /// Acquire attempts made (each one script call), for tests and metrics.
    attempts: std::sync::atomic::AtomicU64,
}

impl LockService {
    /// Starts the release subscription; it stops with `stop`.
    pub fn start(
        redis: Redis,
        keys: Keys,
        instance: &str,
        watchdog_lease: Duration,
        stop: CancellationToken,
    ) -> Arc<Self> {
        let svc = Arc::new(Self {
            redis,
            keys,
            instance: instance.to_owned(),
            waiters: Mutex::new(HashMap::new()),
            watchdog_lease,
            home: tokio::runtime::Handle::current(),
            stop: stop.clone(),
            attempts: Default::default(),
        });
        let me = Arc::downgrade(&svc);
        svc.home.spawn(async move { listen(me, stop).await });
        svc
    }

    /// A new holder identity: give one to each task that takes locks.
    /// Acquire attempts (script calls) this process has made.
    pub fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::Relaxed)
    }

    pub fn watchdog_lease(&self) -> Duration {
        self.watchdog_lease
    }

    pub fn owner(self: &Arc<Self>) -> Owner {
        Owner {
            svc: self.clone(),
            id: format!("{}:{}", self.instance, uuid::Uuid::new_v4().simple()),
        }
    }

    fn waiter(&self, name: &str) -> Arc<Notify> {
        let mut map = self.waiters.lock().expect("waiters poisoned");
        if let Some(n) = map.get(name).and_then(Weak::upgrade) {
            return n;
        }
        map.retain(|_, w| w.strong_count() > 0);
        let n = Arc::new(Notify::new());
        map.insert(name.to_owned(), Arc::downgrade(&n));
        n
    }

    fn wake(&self, name: &str) {
        let n = self
            .waiters
            .lock()
            .expect("waiters poisoned")
            .get(name)
            .and_then(Weak::upgrade);
        if let Some(n) = n {
            n.notify_waiters();
        }
    }
}

async fn listen(svc: Weak<LockService>, stop: CancellationToken) {
    while !stop.is_cancelled() {
        let Some(s) = svc.upgrade() else { return };
        let (client, channel) = (s.redis.client().clone(), s.keys.lock_released());
        drop(s);
        let run = async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&channel).await?;
            let mut messages = pubsub.on_message();
            while let Some(msg) = messages.next().await {
                let name: String = msg.get_payload().unwrap_or_default();
                match svc.upgrade() {
                    Some(s) => s.wake(&name),
                    None => return Ok(()),
                }
            }
            anyhow::Ok(())
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            r = run => if let Err(e) = r {
                tracing::warn!(error = %format!("{e:#}"), "lock release subscription lost; waiters fall back to polling");
            },
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}

/// One holder identity. Cheap to clone; clones are the same owner (reentrancy).
#[derive(Clone)]
pub struct Owner {
    svc: Arc<LockService>,
    id: String,
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
            // Registered before the attempt, so a release between the attempt and the
            // wait still wakes us.
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
                    let _ = tokio::time::timeout(nap, woken).await;
                }
            }
        }
    }

    /// One script call: Ok(fence) if granted, Err(pttl) if held by another.
    async fn attempt(&self, name: &str, lease_ms: u64) -> Result<Result<i64, i64>> {
        let (lock, fence) = self.svc.keys.lock(name);
        self.svc.attempts.fetch_add(1, Ordering::Relaxed);
        let mut conn = self.svc.redis.conn().await?;
        let (granted, n): (i64, i64) = ACQUIRE
            .key(lock)
            .key(fence)
            .arg(&self.id)
            .arg(lease_ms)
            .invoke_async(&mut conn)
            .await
            .context("lock_acquire.lua")?;
        Ok(if granted == 1 { Ok(n) } else { Err(n) })
    }

    fn watchdog(&self, name: &str, lease_ms: u64, lost: Arc<AtomicBool>) -> CancellationToken {
        // A child of the process's token: a process that stops (or dies) stops renewing.
        let stop = self.svc.stop.child_token();
        let (owner, name, stop2) = (self.clone(), name.to_owned(), stop.clone());
        self.svc.home.spawn(async move {
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
        });
        stop
    }

    async fn renew(&self, name: &str, lease_ms: u64) -> Result<bool> {
        let (lock, _) = self.svc.keys.lock(name);
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
        let (lock, _) = self.svc.keys.lock(name);
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
            self.owner.svc.home.spawn(async move {
                let _ = owner.unlock(&name).await;
            });
        }
    }
}
