//! Writes protected by a lock's fencing token: each refuses a token older than the
//! newest one it has seen, so a holder that stalled past its lease (GC pause, lost
//! network) cannot overwrite what the next holder wrote.
use crate::keys::Keys;
use crate::redis_conn::Redis;
use anyhow::{Context, Result};
use redis::Script;
use std::sync::LazyLock;

static FENCED_SET: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/fenced_set.lua")));

/// In a Postgres transaction: records `token` for `resource` and returns true, or
/// returns false (and changes nothing) if a newer token was seen. Call it first in
/// the transaction that does the protected write, and roll back on false.
pub async fn advance_pg(tx: &mut sqlx::PgConnection, resource: &str, token: i64) -> Result<bool> {
    let row: Option<i64> = sqlx::query_scalar(
        "INSERT INTO fencing_tokens (resource, token) VALUES ($1, $2)
         ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
           WHERE fencing_tokens.token <= EXCLUDED.token
         RETURNING token",
    )
    .bind(resource)
    .bind(token)
    .fetch_optional(&mut *tx)
    .await
    .context("advancing a fencing token")?;
    Ok(row.is_some())
}

/// Sets a Redis key unless a newer token has written it; returns whether it wrote.
pub async fn set_redis(redis: &Redis, keys: &Keys, key: &str, token: i64, value: &str) -> Result<bool> {
    let mut conn = redis.conn().await?;
    let written: i64 = FENCED_SET
        .key(key)
        .key(keys.fence_seen(key))
        .arg(token)
        .arg(value)
        .invoke_async(&mut conn)
        .await
        .context("fenced_set.lua")?;
    Ok(written == 1)
}
