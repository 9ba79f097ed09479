//! Orders that crossed a Redis repair: accounted for in Redis before they are
//! stored (see [`crate::epoch`]), and refused ones stored failed.
use super::columns::Columns;
use super::ctx::Ctx;
use super::error::PersistError;
use crate::order::OrderMsg;
use redis::Script;
use sqlx::PgPool;
use std::collections::HashSet;
use std::sync::LazyLock;

static LATE_ADMIT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/late_admit.lua")));

/// The failure of an order in flight across a repair whose unit or shopper was
/// sold again before it arrived.
pub const LATE_CONFLICT: &str =
    "admitted before Redis went back in time; its unit or shopper was sold again before it arrived";

/// Stores orders as `failed` with `reason` (a message the database refuses as
/// such); skips any that conflict with a stored row. Returns how many were stored.
pub async fn store_failed(pg: &PgPool, orders: &[OrderMsg], reason: &str) -> Result<usize, sqlx::Error> {
    let mut cols = Columns::default();
    for o in orders {
        cols.push(o, Some(reason.to_owned()), None);
    }
    let mut conn = pg.acquire().await?;
    Ok(cols.insert(&mut conn).await?.len())
}

/// Runs `late_admit.lua` for orders in flight across a repair; returns the ids
/// Redis cannot count (their unit or shopper was sold again).
pub async fn admit_late(ctx: &Ctx, epoch: i64, late: &[&OrderMsg]) -> Result<HashSet<i64>, PersistError> {
    let mut conflicts = HashSet::new();
    if late.is_empty() {
        return Ok(conflicts);
    }
    let k = &ctx.keys;
    let mut shards = std::collections::HashMap::new();
    for o in late {
        let n = match shards.get(&o.voucher_id) {
            Some(n) => *n,
            None => {
                let n = crate::voucher::repo::shards(&ctx.pg, o.voucher_id).await?;
                shards.insert(o.voucher_id, n);
                n
            }
        };
        // Through a connection verified for the order's sale at Postgres's epoch
        // (a repair of other sales under way does not stop it).
        let verified = ctx
            .redis
            .verified_for(o.voucher_id)
            .await
            .map_err(|e| PersistError::Redis(e.into()))?;
        let Some((mut conn, verified)) = verified else {
            return Err(PersistError::Redis(anyhow::anyhow!(
                "Redis is not verified for this sale yet"
            )));
        };
        if verified != epoch {
            return Err(PersistError::Redis(anyhow::anyhow!(
                "Redis verified at epoch {verified}, Postgres at {epoch}"
            )));
        }
        // The order's shard: its shopper's, as reserve.lua admitted it.
        let shard = crate::keys::shard_of(o.user_id, n);
        let ok: i64 = LATE_ADMIT
            .key(k.stock_at(o.voucher_id, shard, n))
            .key(k.buyers_at(o.voucher_id, shard, n))
            .key(k.admitted_at(o.voucher_id, shard, n))
            .arg(o.user_id)
            .arg(o.id)
            .arg(o.created_ms)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| PersistError::Redis(e.into()))?;
        if ok != 1 {
            tracing::error!(
                order_id = o.id,
                user_id = o.user_id,
                voucher_id = o.voucher_id,
                "INCIDENT: an order in flight across a Redis repair was sold again; stored as failed"
            );
            conflicts.insert(o.id);
        }
    }
    Ok(conflicts)
}
