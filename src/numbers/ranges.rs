//! Ranges of a durable counter, reserved in Postgres: the one authority for order
//! ids and business numbers, so that neither depends on a Redis master, its
//! replicas or its memory.
//!
//! `counter_watermarks.high` is the top of every range ever reserved for a scope
//! (a rule, a tenant and a day; or the UTC day of order ids). A reservation takes
//! the next `size` values above it in one autocommitted statement, `UPDATE ... SET
//! high = high + size RETURNING high`: the row lock orders concurrent callers, each
//! gets a range no other caller ever gets, and the range is durable before anyone
//! uses a value of it. Nothing else decides: no clock, no cache that could go back.
//! A caller that dies with part of a range unused leaves those values unissued
//! (numbers skip, never repeat).
//!
//! Business numbers take one reservation per call (per worker batch, per API
//! request), so they are consecutive in the order they were reserved; order ids
//! take blocks per process ([`crate::numbers::id_worker`]), prefetched in the
//! background, so that the order path never waits for Postgres.
//!
//! The scopes and the mark are those the Redis counter of earlier versions used:
//! its values were all below the mark (it handed out only ranges reserved here),
//! so processes of both versions running side by side never issue one value twice.
use anyhow::{bail, Context, Result};
use sqlx::PgPool;

/// A range of values `first..=last` that belongs to its caller alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub first: u64,
    pub last: u64,
}

/// Reserves the `size` values of `scope` right above every value reserved so far.
pub async fn reserve(pg: &PgPool, scope: &str, size: u64) -> Result<Range> {
    if size == 0 {
        bail!("a reservation takes at least one value");
    }
    let size = i64::try_from(size).context("reservation too large")?;
    let high: i64 = sqlx::query_scalar(
        "INSERT INTO counter_watermarks (scope, high) VALUES ($1, $2)
         ON CONFLICT (scope) DO UPDATE SET high = counter_watermarks.high + $2, updated_at = now()
         RETURNING high",
    )
    .bind(scope)
    .bind(size)
    .fetch_one(pg)
    .await
    .with_context(|| format!("reserving {size} values of counter {scope}"))?;
    Ok(Range {
        first: (high - size + 1) as u64,
        last: high as u64,
    })
}
