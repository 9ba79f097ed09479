//! A Redis counter that never hands out a value twice, even if Redis loses it.
//!
//! Values come from one Lua script per call (`lua/counter_next.lua`). A durable
//! high-water mark per scope lives in Postgres (`counter_watermarks`) and is raised
//! ahead of the counter in steps of `step` (one Postgres write per step, not per
//! value); Redis keeps a copy as the counter's ceiling and the script never passes
//! it. When the counter key is missing, it restarts from the durable mark, so every
//! value issued afterwards is above every value issued before.
//!
//! One window is not covered: an instance reads the durable mark after a loss, and
//! before it initialises the key another instance initialises it, raises the mark,
//! issues values, and Redis loses the key *again*; the first instance then
//! initialises from its stale mark. It takes two losses within one round trip.
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
}

/// A range of values `first..=last` that belongs to the caller alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub first: u64,
    pub last: u64,
}

impl DurableCounter {
    pub fn new(redis: Redis, pg: PgPool, keys: Keys) -> Self {
        Self { redis, pg, keys }
    }

    /// Takes `count` consecutive values of `scope`. The Redis keys live `ttl_secs`
    /// (callers pass "until some time after the scope's day ends"); `step` is how far
    /// ahead of the counter the durable mark is raised.
    pub async fn take(&self, scope: &str, count: u64, ttl_secs: u64, step: u64) -> Result<Range> {
        if count == 0 {
            bail!("a counter call takes at least one value");
        }
        let (value_key, ceiling_key) = self.keys.counter(scope);
        let mut floor = String::new();
        // Each round either succeeds or fixes the one thing that stopped it
        // (missing key, low ceiling); more than a few rounds means a fight over the
        // key that we report rather than loop on.
        for _ in 0..6 {
            let mut conn = self.redis.conn().await?;
            let (code, n): (i64, i64) = NEXT
                .key(&value_key)
                .key(&ceiling_key)
                .arg(count)
                .arg(ttl_secs)
                .arg(&floor)
                .invoke_async(&mut conn)
                .await
                .context("counter_next.lua")?;
            match code {
                1 => {
                    let last = n as u64;
                    return Ok(Range {
                        first: last - count + 1,
                        last,
                    });
                }
                -1 => floor = self.durable_mark(scope).await?.to_string(),
                -2 => {
                    let mark = self.raise_durable_mark(scope, n as u64 + step).await?;
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

    async fn durable_mark(&self, scope: &str) -> Result<u64> {
        let high: Option<i64> = sqlx::query_scalar("SELECT high FROM counter_watermarks WHERE scope = $1")
            .bind(scope)
            .fetch_optional(&self.pg)
            .await
            .context("reading a counter's durable mark")?;
        Ok(high.unwrap_or(0) as u64)
    }

    /// Raises the mark to at least `to` and returns the mark in force.
    async fn raise_durable_mark(&self, scope: &str, to: u64) -> Result<u64> {
        let high: i64 = sqlx::query_scalar(
            "INSERT INTO counter_watermarks (scope, high) VALUES ($1, $2)
             ON CONFLICT (scope) DO UPDATE
               SET high = GREATEST(counter_watermarks.high, EXCLUDED.high), updated_at = now()
             RETURNING high",
        )
        .bind(scope)
        .bind(to as i64)
        .fetch_one(&self.pg)
        .await
        .context("raising a counter's durable mark")?;
        Ok(high as u64)
    }
}
