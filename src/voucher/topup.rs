//! Stock top-ups: Postgres first, then Redis once per top-up, like stock returns.
//!
//! [`record`] raises the sale's stock and total in Postgres and records a pending
//! top-up in the caller's transaction. After the commit, [`apply`] adds the units
//! to the Redis stock (`lua/stock_topup.lua`, idempotent per top-up id: a set of
//! applied ids in the voucher's hash tag) and marks the top-up done. A sharded sale
//! gets the units split over its shards as at load ([`crate::keys::split`]), each
//! shard adding its part once (its own set of applied ids), so a top-up re-applied
//! after a crash part-way adds each shard's part exactly once. A crash or an
//! outage between the two leaves the top-up pending; [`recover`] (the
//! `order-recovery` round) finishes it. So Redis never holds units Postgres lacks
//! (they would be sold and stored `failed`), and no failure after the commit can
//! take units back out.
//!
//! A Redis that lost the sale refuses (the stock key is missing): the top-up stays
//! pending, and the repair that rebuilds the sale from Postgres ([`crate::epoch`]),
//! whose stock already counts it, marks it done. Against a repair running at the
//! same moment, [`apply`] holds the top-up's row locked from before the Redis step
//! until it is marked done (the repair's "mark pending top-ups done" waits for it),
//! and adds nothing while a repair is under way: not while Postgres's epoch row says
//! `repairing`, and not once a repair newer than Postgres's committed epoch has
//! rewritten the sale (the script compares the sale's repair fence with that
//! epoch). Such a repair read the stock after the top-up committed (it holds the
//! voucher's row from that read to its commit), so it counts the units: they are
//! added before the rebuild (which overwrites them with Postgres's count) or not at
//! all.
use crate::keys::Keys;
use crate::redis_conn::Redis;
use crate::voucher::repo;
use crate::voucher::stock::{self, Event};
use anyhow::{Context, Result};
use redis::Script;
use sqlx::PgPool;
use std::sync::LazyLock;
use std::time::Duration;

static TOPUP: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/stock_topup.lua")));

/// Units on their way to a sale's Redis stock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct TopUp {
    pub id: i64,
    pub voucher_id: i64,
    pub units: i32,
}

/// Why [`record`] recorded nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotRecorded {
    #[error("not a flash sale")]
    NotAFlashSale,
    #[error("the total stock would exceed {}", crate::voucher::model::MAX_STOCK)]
    OverLimit,
}

/// The Postgres half, in the caller's transaction: stock and total_stock + `units`
/// and a pending top-up; nothing if the voucher is not a flash sale or its total
/// stock would pass the limit ([`repo::add_stock`] checks it in its UPDATE).
pub async fn record(
    tx: &mut sqlx::PgConnection,
    voucher_id: i64,
    units: i32,
) -> Result<std::result::Result<TopUp, NotRecorded>> {
    match repo::add_stock(&mut *tx, voucher_id, units).await? {
        repo::Added::Added => {}
        repo::Added::NotAFlashSale => return Ok(Err(NotRecorded::NotAFlashSale)),
        repo::Added::OverLimit => return Ok(Err(NotRecorded::OverLimit)),
    }
    let id: i64 = sqlx::query_scalar("INSERT INTO stock_topups (voucher_id, units) VALUES ($1, $2) RETURNING id")
        .bind(voucher_id)
        .bind(units)
        .fetch_one(&mut *tx)
        .await
        .context("recording a top-up")?;
    Ok(Ok(TopUp { id, voucher_id, units }))
}

/// Top-up `id`, done or pending.
pub async fn get(db: impl sqlx::PgExecutor<'_>, id: i64) -> Result<Option<TopUp>> {
    sqlx::query_as("SELECT id, voucher_id, units FROM stock_topups WHERE id = $1")
        .bind(id)
        .fetch_optional(db)
        .await
        .context("reading a top-up")
}

/// The Redis half of top-up `id`, then marks it done. True if the top-up is complete
/// (now, or before: by another caller or a repair); false if it stays pending (Redis
/// lost the sale, or a repair is under way: it counts the top-up).
pub async fn apply(pg: &PgPool, redis: &Redis, keys: &Keys, id: i64) -> Result<bool> {
    let mut tx = pg.begin().await?;
    // Locked until marked done: a repair marking pending top-ups done waits for it.
    let pending: Option<TopUp> =
        sqlx::query_as("SELECT id, voucher_id, units FROM stock_topups WHERE id = $1 AND done_at IS NULL FOR UPDATE")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .context("reading a pending top-up")?;
    let Some(t) = pending else {
        tx.rollback().await?;
        return Ok(true);
    };
    let shards = repo::shards(&mut *tx, t.voucher_id).await?;
    // The newest repair Postgres has committed (none yet: 0), and whether one under
    // way rebuilds this sale (a repair of other sales only does not stop it).
    let (epoch, repairing): (i64, bool) = sqlx::query_as(
        "SELECT epoch, repairing AND (repair_scope_epoch IS DISTINCT FROM epoch OR repair_scope IS NULL
                                      OR $2 = ANY(repair_scope))
           FROM redis_epochs WHERE namespace = $1",
    )
    .bind(keys.namespace())
    .bind(t.voucher_id)
    .fetch_optional(&mut *tx)
    .await
    .context("reading the Redis epoch")?
    .unwrap_or((0, false));
    if repairing {
        tracing::warn!(top_up = id, "the sale is being repaired; the top-up stays pending");
        // At once, not when the pool next uses the connection: the repair marking
        // pending top-ups done waits for this row's lock.
        tx.rollback().await?;
        return Ok(false);
    }
    let mut conn = redis.conn().await?;
    // 1 if some shard added its part now, 0 if every part was added before, < 0 if a
    // shard refused (the parts added stay; the repair overwrites them all).
    let mut r = 0;
    for (k, part) in crate::keys::split(t.units as i64, shards).into_iter().enumerate() {
        if part == 0 {
            continue;
        }
        let k = k as u32;
        let one: i64 = TOPUP
            .key(keys.stock_at(t.voucher_id, k, shards))
            .key(keys.topups_at(t.voucher_id, k, shards))
            .key(keys.repair_fence_at(t.voucher_id, k, shards))
            .arg(t.id)
            .arg(part)
            .arg(epoch)
            .invoke_async(&mut conn)
            .await
            .context("stock_topup.lua")?;
        if one < 0 {
            r = one;
            break;
        }
        r = r.max(one);
    }
    if r < 0 {
        tracing::warn!(
            top_up = id,
            voucher_id = t.voucher_id,
            "the sale's stock is not loaded in Redis (or is being rebuilt); the top-up stays pending"
        );
        tx.rollback().await?;
        return Ok(false);
    }
    sqlx::query("UPDATE stock_topups SET done_at = now() WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await
        .context("marking a top-up done")?;
    tx.commit().await.context("marking a top-up done")?;
    if r == 1 {
        // Every instance forgets that the sale was sold out.
        if let Err(e) = stock::publish(redis, keys, Event::Stock(t.voucher_id)).await {
            tracing::warn!(error = %format!("{e:#}"), "could not announce added stock");
        }
    }
    Ok(true)
}

/// Finishes top-ups pending for longer than `min_age`. Returns how many it finished.
pub async fn recover(pg: &PgPool, redis: &Redis, keys: &Keys, min_age: Duration) -> Result<usize> {
    let pending: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM stock_topups
          WHERE done_at IS NULL AND created_at < now() - make_interval(secs => $1)
          ORDER BY id LIMIT 1000",
    )
    .bind(min_age.as_secs_f64())
    .fetch_all(pg)
    .await
    .context("finding pending top-ups")?;
    let mut done = 0;
    for id in pending {
        if apply(pg, redis, keys, id).await? {
            done += 1;
        }
    }
    Ok(done)
}

/// For a repair that rebuilt `vouchers` from Postgres ([`crate::epoch`]), in its
/// transaction: Postgres's stock already counts their pending top-ups, so Redis must
/// not add them again.
pub async fn sales_rebuilt(tx: &mut sqlx::PgConnection, vouchers: &[i64]) -> Result<()> {
    sqlx::query("UPDATE stock_topups SET done_at = now() WHERE voucher_id = ANY($1) AND done_at IS NULL")
        .bind(vouchers)
        .execute(&mut *tx)
        .await
        .context("marking rebuilt sales' top-ups done")?;
    Ok(())
}
