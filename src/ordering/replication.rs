//! Orders acknowledged only once replicas hold them (`SECKILL_REDIS_WAIT_REPLICAS`):
//! the script and a `WAIT` in one pipeline, over connections of their own.
use crate::redis_conn::Redis;
use redis::Value;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, LazyLock};

/// `lua/reserve.lua` after `lua/history.lua`, as `gates.rs` runs it (the same
/// text, so the same hash).
pub const SOURCE: &str = crate::shard_script!("reserve");
static SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(SOURCE));

/// Replicas an order's reservation must reach before it is acknowledged.
#[derive(Clone)]
pub struct Replication {
    pub replicas: u32,
    /// How long `WAIT` waits for them.
    pub deadline: std::time::Duration,
    /// Connections for script + `WAIT` pipelines, taken in turn.
    pub links: Arc<[Redis]>,
    pub next: Arc<std::sync::atomic::AtomicUsize>,
    /// The in-sync replicas of each slot's master, as last read ([`run_watch`]).
    pub watch: Arc<ReplicaWatch>,
}

impl Replication {
    /// `replicas` 0: none is awaited. Otherwise `links` handles on `redis`'s servers.
    pub fn new(redis: &Redis, replicas: u32, deadline: std::time::Duration, timeout: std::time::Duration) -> Self {
        let links = if replicas == 0 {
            Vec::new()
        } else {
            (0..WAIT_LINKS).map(|_| redis.dedicated(timeout + deadline)).collect()
        };
        Self {
            replicas,
            deadline,
            links: links.into(),
            next: Default::default(),
            watch: Arc::new(ReplicaWatch::new()),
        }
    }
}

/// The in-sync replicas of every slot's master (`INFO replication`, see
/// [`crate::redis_conn::in_sync_of`]), refreshed off the order path: an order on a
/// shard whose master has fewer than it waits for is refused before it reserves,
/// holding no unit (as Redis's `min-replicas-to-write` would refuse the write).
pub struct ReplicaWatch {
    slots: Box<[AtomicU8]>,
    read: AtomicBool,
}

impl ReplicaWatch {
    fn new() -> Self {
        Self {
            slots: (0..16384).map(|_| AtomicU8::new(0)).collect(),
            read: AtomicBool::new(false),
        }
    }

    /// In-sync replicas of the master of `key`'s slot. Before the first reading
    /// (one round trip after the start) there is no figure to refuse by: `WAIT`
    /// alone decides, as it does after every reservation.
    pub fn in_sync(&self, key: &str) -> i64 {
        if !self.read.load(Ordering::Acquire) {
            return i64::MAX;
        }
        self.slots[crate::keys::slot(key.as_bytes()) as usize].load(Ordering::Relaxed) as i64
    }

    /// Takes a reading of every master.
    pub fn set(&self, masters: &crate::redis_conn::InSync) {
        for (n, ranges) in masters {
            let n = (*n).clamp(0, u8::MAX as i64) as u8;
            for &(a, b) in ranges {
                for slot in a..=b.min(16383) {
                    self.slots[slot as usize].store(n, Ordering::Relaxed);
                }
            }
        }
        self.read.store(true, Ordering::Release);
    }
}

/// Until `stop`: every `every`, reads every master's in-sync replicas into `watch`.
/// A reading that fails leaves the last one (an order on a master that does not
/// answer fails on its own).
pub async fn run_watch(
    redis: Redis,
    watch: Arc<ReplicaWatch>,
    every: std::time::Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failures = 0u32;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        match redis.in_sync_replicas().await {
            Ok(masters) => {
                failures = 0;
                watch.set(&masters);
            }
            Err(e) => {
                failures += 1;
                if failures <= 3 || failures.is_multiple_of(240) {
                    tracing::warn!(error = %e, "reading the masters' in-sync replicas failed");
                }
            }
        }
    }
}

/// Connections for orders awaiting replicas: each carries one order's `WAIT` at a
/// time, for about one replication round trip.
const WAIT_LINKS: usize = 16;

/// The script (EVALSHA, or EVAL once if the server does not know it yet) and
/// `WAIT replicas deadline` in one pipeline: the script's reply and how many
/// replicas acknowledged its writes.
pub(super) async fn reserve_and_wait(
    conn: &mut crate::redis_conn::Conn,
    keys: &[String],
    args: &[Vec<u8>],
    r: &Replication,
) -> redis::RedisResult<(Value, i64)> {
    let wait_ms = r.deadline.as_millis().max(1) as u64;
    let pipeline = |script: redis::Cmd| {
        let mut script = script;
        script.arg(keys.len()).arg(keys).arg(args);
        let mut pipe = redis::pipe();
        pipe.add_command(script).cmd("WAIT").arg(r.replicas).arg(wait_ms);
        pipe
    };
    let mut evalsha = redis::cmd("EVALSHA");
    evalsha.arg(SCRIPT.get_hash());
    match pipeline(evalsha).query_async(conn).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            let mut eval = redis::cmd("EVAL");
            eval.arg(SOURCE);
            pipeline(eval).query_async(conn).await
        }
        other => other,
    }
}
