//! A Redis counter that never hands out a value twice, even if Redis loses it.
//!
//! Values come from one Lua script per call (`lua/counter_next.lua`). Redis keeps
//! the counter and its ceiling; Postgres (`counter_watermarks`) keeps the durable
//! mark, the top of every range it ever *reserved*. The script hands out only
//! values of reservations applied to the key it runs on. A reservation is the next
//! `max(step, count)` values above the mark (or above the key's ceiling, if that is
//! higher), taken by raising the mark in one statement (one Postgres write per
//! `step` values), so no two ever overlap. A reservation is passed to one script
//! call at most and dropped afterwards, whatever the reply, so it is applied at
//! most once.
//!
//! A key at its ceiling `c` asks for the range right above it, granted only while
//! the mark is still `c`: the key's values go on without a gap, and when several
//! callers reach the ceiling at once one of them extends it and the others find it
//! extended. If the mark has moved past `c` and the key does not follow (the caller
//! that moved it died, or the key restarted from an old mark), the caller waits a
//! while (up to half a second), then reserves above the mark and the key jumps
//! there: values may be skipped, never repeated. The wait only decides whether
//! values are skipped.
//!
//! A missing key (Redis lost it, or a new day; or only its ceiling was lost)
//! restarts at the durable mark *with nothing to hand out* (ceiling = mark): the
//! mark may have been read before one loss and applied after another, below values
//! issued in between, so only a reservation made afterwards makes values
//! available.
//!
//! Every process issuing from a scope must run this design: an older one (which
//! raised the mark to "what it needs plus a step" and handed out everything below)
//! would hand out values reserved here for someone else. The README's upgrade
//! section says so.
//!
//! Redis going back in time (a restart from an older snapshot, a failover to a
//! lagging replica) would bring back an old value *and* its old ceiling, both valid
//! looking, and values between them may have been issued already. That is why the
//! keys carry the Redis epoch ([`crate::epoch`]): the service only uses a server
//! whose epoch Postgres vouches for, and a server that may have gone back gets a
//! new epoch, so new keys. Reading the mark for a new key stamps the scope with the
//! caller's epoch, and reservations for an older epoch than the stamp are refused:
//! keys of an epoch being retired cannot grow.
//!
//! With `SECKILL_REDIS_WAIT_REPLICAS` above 0 ([`DurableCounter::with_replicas`]) a
//! range is handed out only once that many replicas hold it (`WAIT`, in the same
//! pipeline as the script, over a connection of the counter's own), so a failover
//! to a replica cannot hand the same values out again in the moment before the
//! epoch guard notices the new master.
use crate::keys::Keys;
use crate::redis_conn::Redis;
use anyhow::{bail, Context, Result};
use redis::Script;
use sqlx::PgPool;
use std::sync::LazyLock;

/// How many times a caller at the key's ceiling asks for the range right above it
/// (waiting 2, 4, ... 256 ms between: half a second in all, for a busy machine)
/// before it reserves above the mark instead.
const ADJACENT_TRIES: u32 = 8;

static NEXT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/counter_next.lua")));

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

impl Range {
    /// The `size` values that end at `last` (a reservation's, `last` the new mark).
    fn ending_at(last: u64, size: u64) -> Self {
        Range {
            first: last - size + 1,
            last,
        }
    }
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
    /// (callers pass "until some time after the scope's day ends"); `step` is how many
    /// values one reservation takes from Postgres.
    pub async fn take(&self, scope: &str, count: u64, ttl_secs: u64, step: u64) -> Result<Range> {
        if count == 0 {
            bail!("a counter call takes at least one value");
        }
        // The durable mark, to restart a missing key from.
        let mut floor = String::new();
        // A reservation from Postgres, for the next script call only.
        let mut reserved: Option<Range> = None;
        // Reservations right above the key's ceiling that another caller won.
        let mut misses = 0u32;
        // Each round either succeeds or fetches what stopped it (the mark for a
        // missing key, a reservation at the ceiling); more than a few rounds means
        // a fight over the key that we report rather than loop on.
        for _ in 0..(ADJACENT_TRIES + 6) {
            let Some((mut conn, epoch)) = self.redis.for_counters().await? else {
                bail!("Redis is not verified yet (it may have gone back in time); no values until it is");
            };
            let (value_key, ceiling_key) = self.keys.counter(scope, epoch);
            // Dropped here whatever happens next: a call that fails may still have
            // applied it, and applying one twice would issue its values twice.
            let (lo, hi) = match reserved.take() {
                Some(r) => ((r.first - 1).to_string(), r.last.to_string()),
                None => (String::new(), String::new()),
            };
            let floor_arg = std::mem::take(&mut floor);
            let mut next = NEXT.prepare_invoke();
            next.key(&value_key)
                .key(&ceiling_key)
                .arg(count)
                .arg(ttl_secs)
                .arg(&floor_arg)
                .arg(&lo)
                .arg(&hi);
            let ((code, n, ceiling), acked): ((i64, i64, i64), Option<i64>) = match self.wait {
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
                        .arg(&floor_arg)
                        .arg(&lo)
                        .arg(&hi)
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
                    let ceiling = ceiling.max(0) as u64;
                    let size = step.max(count);
                    if misses < ADJACENT_TRIES {
                        reserved = self.reserve_adjacent(scope, ceiling, size, epoch).await?;
                        if reserved.is_none() {
                            // Someone else took the range above this ceiling: most
                            // likely the key is being extended right now.
                            misses += 1;
                            tokio::time::sleep(std::time::Duration::from_millis(1 << misses)).await;
                        }
                    } else {
                        misses = 0;
                        reserved = Some(self.reserve_above(scope, ceiling, size, epoch).await?);
                    }
                }
                other => bail!("counter_next.lua returned unknown code {other}"),
            }
        }
        bail!("counter {scope}: no value after repeated attempts (contention on a lost key?)")
    }

    /// The durable mark, to restart the keys of `epoch` from. Stamps the mark with
    /// the epoch first, so that keys of an older epoch can no longer be extended.
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

    /// Reserves `ceiling+1 ..= ceiling+size` if the mark is still `ceiling` (no one
    /// has reserved above it); `None` if it has moved, or belongs to a newer epoch.
    async fn reserve_adjacent(&self, scope: &str, ceiling: u64, size: u64, epoch: i64) -> Result<Option<Range>> {
        let high: Option<i64> = sqlx::query_scalar(
            "UPDATE counter_watermarks SET high = high + $2, epoch = $3, updated_at = now()
              WHERE scope = $1 AND high = $4 AND epoch <= $3
              RETURNING high",
        )
        .bind(scope)
        .bind(size as i64)
        .bind(epoch)
        .bind(ceiling as i64)
        .fetch_optional(&self.pg)
        .await
        .context("reserving counter values")?;
        Ok(high.map(|h| Range::ending_at(h as u64, size)))
    }

    /// Reserves the `size` values above both the mark and `ceiling`, raising the
    /// mark in the same statement. Refused for keys of an epoch older than the one
    /// that last stamped the scope.
    async fn reserve_above(&self, scope: &str, ceiling: u64, size: u64, epoch: i64) -> Result<Range> {
        let high: Option<i64> = sqlx::query_scalar(
            "INSERT INTO counter_watermarks (scope, high, epoch) VALUES ($1, $4 + $2, $3)
             ON CONFLICT (scope) DO UPDATE
               SET high = GREATEST(counter_watermarks.high, $4) + $2,
                   epoch = EXCLUDED.epoch, updated_at = now()
               WHERE counter_watermarks.epoch <= EXCLUDED.epoch
             RETURNING high",
        )
        .bind(scope)
        .bind(size as i64)
        .bind(epoch)
        .bind(ceiling as i64)
        .fetch_optional(&self.pg)
        .await
        .context("reserving counter values")?;
        match high {
            Some(h) => Ok(Range::ending_at(h as u64, size)),
            None => bail!("counter {scope}: Redis epoch {epoch} is behind the durable mark's; not issuing from it"),
        }
    }
}
