//! Orders acknowledged only once replicas hold them (`SECKILL_REDIS_WAIT_REPLICAS`):
//! the script and a `WAIT` in one pipeline, over connections of their own.
use crate::redis_conn::Redis;
use redis::Value;
use std::sync::{Arc, LazyLock};

/// `lua/reserve.lua`, as `gates.rs` runs it (the same text, so the same hash).
const SOURCE: &str = include_str!("../../lua/reserve.lua");
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
    args: &[String],
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
