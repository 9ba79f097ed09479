//! A Redis counter that never hands out a value twice, even if Redis loses it.
//!
//! Values come from one Lua script per call (`lua/counter_next.lua`). A durable
//! high-water mark per scope lives in Postgres (`counter_watermarks`) and is raised
//! ahead of the counter in steps of `step` (one Postgres write per step, not per
//! value); Redis keeps a copy as the counter's ceiling and the script never passes
//! it. When the counter key is missing, it restarts from the durable mark, so every
//! value issued afterwards is above every value issued before.
//!
//! Redis going back in time (a restart from an older snapshot, a failover to a
//! lagging replica) would bring back an old value *and* its old ceiling, both valid
//! looking. That is why the keys carry the Redis epoch ([`crate::epoch`]): the
//! service only uses a server whose epoch Postgres vouches for, and a server that
//! may have gone back gets a new epoch, so new keys, which start from the durable
//! mark.
//!
//! With `SECKILL_REDIS_WAIT_REPLICAS` above 0 ([`DurableCounter::with_replicas`]) a
//! range is handed out only once that many replicas hold it (`WAIT`, in the same
//! pipeline as the script, over a connection of the counter's own), so a failover
//! to a replica cannot hand the same values out again in the moment before the
//! epoch guard notices the new master.
//!
//! One window is not covered: an instance reads the durable mark after a loss, and
//! before it initialises the key another instance initialises it, raises the mark,
//! issues values, and Redis loses the key *again* (same server, same epoch); the
//! first instance then initialises from its stale mark. It takes two losses within
//! one round trip.
use crate::keys::Keys;
use crate::redis_conn::Redis;
use anyhow::{bail, Context, Result};
use redis::Script;
use sqlx::PgPool;
use std::sync::LazyLock;

static NEXT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/counter_next.lua")));
static RAISE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/counter_raise.lua")));

/// Durable counters under one namespace.
#[derive(Clone)]
pub struct DurableCounter {
    redis: Redis,
    pg: PgPool,
    keys: Keys,
    /// Replicas that must hold a range before it is handed out, and how long to
    /// wait for them.
    wait: Option<(u32, std::time::Duration)>,
}

/// A range of values `first..=last` that belongs to the caller alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub first: u64,
    pub last: u64,
}

impl DurableCounter {
    pub fn new(redis: Redis, pg: PgPool, keys: Keys) -> Self {
        Self {
            redis,
            pg,
            keys,
            wait: None,
        }
    }

    /// Hands a range out only once `replicas` replicas hold it (none: 0). `WAIT`
    /// holds its connection until they answer, so the counter gets one of its own.
    pub fn with_replicas(mut self, replicas: u32, deadline: std::time::Duration, timeout: std::time::Duration) -> Self {
        if replicas > 0 {
            self.redis = self.redis.dedicated(timeout + deadline);
            self.wait = Some((replicas, deadline));
        }
        self
    }

    /// Takes `count` consecutive values of `scope`. The Redis keys live `ttl_secs`
    /// (callers pass "until some time after the scope's day ends"); `step` is how far
    /// ahead of the counter the durable mark is raised.
    pub async fn take(&self, scope: &str, count: u64, ttl_secs: u64, step: u64) -> Result<Range> {
        if count == 0 {
            bail!("a counter call takes at least one value");
        }
        let mut floor = String::new();
        // Each round either succeeds or fixes the one thing that stopped it
        // (missing key, low ceiling); more than a few rounds means a fight over the
        // key that we report rather than loop on.
        for _ in 0..6 {
            let Some((mut conn, epoch)) = self.redis.for_counters().await? else {
                bail!("Redis is not verified yet (it may have gone back in time); no values until it is");
            };
            let (value_key, ceiling_key) = self.keys.counter(scope, epoch);
            let mut next = NEXT.prepare_invoke();
            next.key(&value_key)
                .key(&ceiling_key)
                .arg(count)
                .arg(ttl_secs)
                .arg(&floor);
            let ((code, n), acked): ((i64, i64), Option<i64>) = match self.wait {
                None => (next.invoke_async(&mut conn).await.context("counter_next.lua")?, None),
                Some((replicas, deadline)) => {
                    // EVAL, not EVALSHA: this pipeline cannot load the script on the
                    // way, and counters are called once per block of values.
                    let mut pipe = redis::pipe();
                    pipe.cmd("EVAL")
                        .arg(include_str!("../../lua/counter_next.lua"))
                        .arg(2)
                        .arg(&value_key)
                        .arg(&ceiling_key)
                        .arg(count)
                        .arg(ttl_secs)
                        .arg(&floor)
                        .cmd("WAIT")
                        .arg(replicas)
                        .arg(deadline.as_millis().max(1) as u64);
                    let (reply, acked) = pipe.query_async(&mut conn).await.context("counter_next.lua + WAIT")?;
                    (reply, Some(acked))
                }
            };
            match code {
                1 if acked.is_some_and(|a| a < self.wait.map_or(0, |w| w.0) as i64) => {
                    // Taken on the master but not yet safe: a failover could hand
                    // them out again. Skipped (numbers may skip, never repeat).
                    bail!("counter {scope}: values not held by enough Redis replicas in time");
                }
                1 => {
                    let last = n as u64;
                    return Ok(Range {
                        first: last - count + 1,
                        last,
                    });
                }
                -1 => floor = self.durable_mark(scope, epoch).await?.to_string(),
                -2 => {
                    let mark = self.raise_durable_mark(scope, n as u64 + step, epoch).await?;
                    let _: i64 = RAISE
                        .key(&ceiling_key)
                        .arg(mark)
                        .arg(ttl_secs)
                        .invoke_async(&mut conn)
                        .await
                        .context("counter_raise.lua")?;
                }
                other => bail!("counter_next.lua returned unknown code {other}"),
            }
        }
        bail!("counter {scope}: no value after repeated attempts (contention on a lost key?)")
    }

    /// The durable mark, to start the keys of `epoch` from. Stamps the mark with
    /// the epoch first, so that keys of an older epoch can no longer raise it.
    async fn durable_mark(&self, scope: &str, epoch: i64) -> Result<u64> {
        let (high, stamped): (i64, i64) = sqlx::query_as(
            "INSERT INTO counter_watermarks (scope, high, epoch) VALUES ($1, 0, $2)
             ON CONFLICT (scope) DO UPDATE
               SET epoch = GREATEST(counter_watermarks.epoch, EXCLUDED.epoch), updated_at = now()
             RETURNING high, epoch",
        )
        .bind(scope)
        .bind(epoch)
        .fetch_one(&self.pg)
        .await
        .context("reading a counter's durable mark")?;
        if stamped > epoch {
            bail!("counter {scope}: Redis epoch {epoch} is behind {stamped}; not issuing from it");
        }
        Ok(high as u64)
    }

    /// Raises the mark to at least `to` and returns the mark in force; refused for
    /// keys of an epoch older than the one that last stamped the mark.
    async fn raise_durable_mark(&self, scope: &str, to: u64, epoch: i64) -> Result<u64> {
        let high: Option<i64> = sqlx::query_scalar(
            "INSERT INTO counter_watermarks (scope, high, epoch) VALUES ($1, $2, $3)
             ON CONFLICT (scope) DO UPDATE
               SET high = GREATEST(counter_watermarks.high, EXCLUDED.high),
                   epoch = EXCLUDED.epoch, updated_at = now()
               WHERE counter_watermarks.epoch <= EXCLUDED.epoch
             RETURNING high",
        )
        .bind(scope)
        .bind(to as i64)
        .bind(epoch)
        .fetch_optional(&self.pg)
        .await
        .context("raising a counter's durable mark")?;
        match high {
            Some(h) => Ok(h as u64),
            None => bail!("counter {scope}: Redis epoch {epoch} is behind the durable mark's; not issuing from it"),
        }
    }
}
