//! The lock service of one process: its Redis, the lock scripts, the local
//! waiters of each lock and the subscription that wakes them on a release.
use crate::keys::Keys;
use crate::redis_conn::Redis;
use futures::StreamExt;
use redis::Script;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub(super) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/lock_acquire.lua")));
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/lock_release.lua")));
pub(super) static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/lock_renew.lua")));

/// How many locks' highest tokens a process remembers.
const TOKENS_KEPT: usize = 100_000;

/// Longest a waiter sleeps between attempts when no release arrives (a lost
/// pub/sub message costs at most this).
pub(super) const MAX_NAP: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReleaseError {
    #[error("the lock's lease had run out")]
    Expired,
    #[error("the lock is held by another owner")]
    NotOwner,
}

/// The locks of one process.
pub struct LockService {
    pub(super) redis: Redis,
    pub(super) keys: Keys,
    pub(super) instance: String,
    pub(super) waiters: Mutex<HashMap<String, Weak<Notify>>>,
    /// The lease a watchdog keeps renewing (`SECKILL_LOCK_LEASE_MS`, 30 s by
    /// default as in Redisson).
    pub(super) watchdog_lease: Duration,
    /// Background work (watchdogs, the subscription) runs on the main runtime.
    pub(super) main_runtime: tokio::runtime::Handle,
    /// Watchdogs and background releases: owned, so that shutdown waits for them.
    pub(super) tasks: tokio_util::task::TaskTracker,
    /// Stops the subscription and every watchdog of this process.
    pub(super) stop: CancellationToken,
    /// Acquire attempts made (each one script call), for tests and metrics.
    pub(super) attempts: std::sync::atomic::AtomicU64,
    /// Waiters woken by a release (not by their nap running out), for tests.
    pub(super) wakeups: std::sync::atomic::AtomicU64,
    /// The highest fencing token of each lock this process has been granted.
    pub(super) tokens: Mutex<HashMap<String, i64>>,
}

impl LockService {
    /// The highest fencing token of lock `name` this process has been granted (0).
    pub(super) fn tokens_seen(&self, name: &str) -> i64 {
        self.tokens
            .lock()
            .expect("tokens poisoned")
            .get(name)
            .copied()
            .unwrap_or(0)
    }

    /// Remembers a token granted for lock `name`. At most [`TOKENS_KEPT`] locks are
    /// remembered (per-shopper locks are many): past that the memory starts over,
    /// and a lock forgotten is protected by its counter in Redis alone.
    pub(super) fn saw_token(&self, name: &str, token: i64) {
        let mut tokens = self.tokens.lock().expect("tokens poisoned");
        if tokens.len() >= TOKENS_KEPT && !tokens.contains_key(name) {
            tokens.clear();
        }
        let seen = tokens.entry(name.to_owned()).or_default();
        *seen = (*seen).max(token);
    }

    /// Starts the release subscription as a task of its own (for tools and tests);
    /// the application spawns [`LockService::follow_releases`] among its owned tasks.
    /// It stops with `stop`.
    pub fn start(
        redis: Redis,
        keys: Keys,
        instance: &str,
        watchdog_lease: Duration,
        stop: CancellationToken,
    ) -> Arc<Self> {
        let svc = Self::new(redis, keys, instance, watchdog_lease, stop.clone());
        svc.main_runtime.spawn(svc.follow_releases(stop));
        svc
    }

    /// The service without its release subscription: run
    /// [`LockService::follow_releases`] for waiters to be woken by releases.
    pub fn new(
        redis: Redis,
        keys: Keys,
        instance: &str,
        watchdog_lease: Duration,
        stop: CancellationToken,
    ) -> Arc<Self> {
        Arc::new(Self {
            redis,
            keys,
            instance: instance.to_owned(),
            waiters: Mutex::new(HashMap::new()),
            tokens: Mutex::new(HashMap::new()),
            watchdog_lease,
            main_runtime: tokio::runtime::Handle::current(),
            tasks: tokio_util::task::TaskTracker::new(),
            stop,
            attempts: Default::default(),
            wakeups: Default::default(),
        })
    }

    /// The watchdogs and background releases of this process's locks.
    pub fn tasks(&self) -> &tokio_util::task::TaskTracker {
        &self.tasks
    }

    /// Wakes this process's waiters when a lock is released anywhere, until `stop`
    /// (or until the service is dropped).
    pub fn follow_releases(
        self: &Arc<Self>,
        stop: CancellationToken,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        listen(Arc::downgrade(self), stop)
    }

    /// Acquire attempts (script calls) this process has made.
    pub fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::Relaxed)
    }

    /// Waiters of this process woken by a release message: at most one per release
    /// this process heard of.
    pub fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }

    pub fn watchdog_lease(&self) -> Duration {
        self.watchdog_lease
    }

    pub(super) fn waiter(&self, name: &str) -> Arc<Notify> {
        let mut map = self.waiters.lock().expect("waiters poisoned");
        if let Some(n) = map.get(name).and_then(Weak::upgrade) {
            return n;
        }
        map.retain(|_, w| w.strong_count() > 0);
        let n = Arc::new(Notify::new());
        map.insert(name.to_owned(), Arc::downgrade(&n));
        n
    }

    /// Wakes the longest-waiting local waiter of `name`, one only: the others keep
    /// waiting for the next release (or their nap). A waiter that was woken but
    /// has gone (its request dropped, its wait over) passes the wake-up on to the
    /// next one (tokio's `Notify` does), and with no waiter it is kept for the next
    /// to come, which then tries at once.
    fn wake(&self, name: &str) {
        let n = self
            .waiters
            .lock()
            .expect("waiters poisoned")
            .get(name)
            .and_then(Weak::upgrade);
        if let Some(n) = n {
            n.notify_one();
        }
    }
}

async fn listen(svc: Weak<LockService>, stop: CancellationToken) {
    while !stop.is_cancelled() {
        let Some(s) = svc.upgrade() else { return };
        let (redis, channel) = (s.redis.clone(), s.keys.lock_released());
        drop(s);
        let run = async {
            let mut pubsub = redis.pubsub().await?;
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
