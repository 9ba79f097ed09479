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
//! A shard that lost the sale, or that a repair closed, refuses (its stock key is
//! missing): the top-up stays pending, and the sale's repair is asked for. A repair
//! ([`crate::recovery`]) reads Postgres's stock, which counts every top-up committed
//! before its snapshot, and writes the ids of those top-ups into every shard's set
//! of applied ids: applied afterwards, such a top-up adds nothing (and is marked
//! done); a top-up committed after the snapshot is added once the sale reopens. A
//! shard that went back in time (behind this process's floor) is refused and
//! closed by the script itself.
use crate::keys::Keys;
use crate::recovery::side::Side;
use crate::recovery::Recovery;
use crate::redis_conn::{Conn, Redis};
use crate::sales::repo;
use crate::sales::stock::{self, Event};
use anyhow::{Context, Result};
use redis::Script;
use sqlx::PgPool;
use std::sync::LazyLock;
use std::time::Duration;

static TOPUP: LazyLock<Script> = LazyLock::new(|| Script::new(crate::shard_script!("stock_topup")));

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
    #[error("no such voucher")]
    NotFound,
    #[error("not a flash sale")]
    NotAFlashSale,
    #[error("the total stock would exceed {}", crate::sales::model::MAX_STOCK)]
    OverLimit,
    #[error("a raffle's stock is fixed at its draw_at")]
    RaffleClosed,
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
        repo::Added::RaffleClosed => return Ok(Err(NotRecorded::RaffleClosed)),
    }
    let id: i64 = sqlx::query_scalar("INSERT INTO stock_topups (voucher_id, units) VALUES ($1, $2) RETURNING id")
        .bind(voucher_id)
        .bind(units)
        .fetch_one(&mut *tx)
        .await
        .context("recording a top-up")?;
    Ok(Ok(TopUp { id, voucher_id, units }))
}

/// The ids of every top-up of the sale `voucher` Postgres has committed, in order.
pub async fn ids_of_sale(db: impl sqlx::PgExecutor<'_>, voucher: i64) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar("SELECT id FROM stock_topups WHERE voucher_id = $1 ORDER BY id")
        .bind(voucher)
        .fetch_all(db)
        .await
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
/// (now, or before: by another caller, or counted by a repair); false if it stays
/// pending (a shard lost the sale, went back in time, or is being repaired).
pub async fn apply(pg: &PgPool, redis: &Redis, keys: &Keys, recovery: &Recovery, id: i64) -> Result<bool> {
    let mut tx = pg.begin().await?;
    // Locked until marked done: two callers apply one top-up one after the other.
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
    if recovery.is_closed(t.voucher_id) {
        tracing::warn!(top_up = id, "the sale is being repaired; the top-up stays pending");
        tx.rollback().await?;
        return Ok(false);
    }
    let mut conn = redis.conn().await?;
    let r = add_parts(&mut conn, keys, recovery, &t, shards).await?;
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

/// Adds each shard's part of top-up `t` (`lua/stock_topup.lua`, once per shard
/// and top-up). 1 if some shard added its part now, 0 if every part was added
/// before, < 0 if a shard refused (the parts added stay; the repair overwrites
/// them all): its repair is asked for; -5 if a part is short of its replicas (the
/// top-up stays pending).
async fn add_parts(conn: &mut Conn, keys: &Keys, recovery: &Recovery, t: &TopUp, shards: u32) -> Result<i64> {
    let mut r = 0;
    for (k, part) in crate::keys::split(t.units as i64, shards).into_iter().enumerate() {
        if part == 0 {
            continue;
        }
        let k = k as u32;
        let tag = crate::keys::shard_tag(t.voucher_id, k, shards);
        let side = Side {
            tag: &tag,
            script: &TOPUP,
            keys: vec![
                keys.stock_at(t.voucher_id, k, shards),
                keys.topups_at(t.voucher_id, k, shards),
                keys.seq_at(t.voucher_id, k, shards),
                keys.hist_at(t.voucher_id, k, shards),
            ],
            also: None,
            reads: crate::recovery::side::wrote_on_one,
        };
        let w = recovery
            .side_write(conn, side, |call| {
                vec![
                    t.id.to_string().into_bytes(),
                    part.to_string().into_bytes(),
                    call.seqs().into_bytes(),
                    call.names(),
                    call.name.to_vec(),
                ]
            })
            .await
            .context("stock_topup.lua")?;
        let one = w.code;
        if !w.acked {
            // Short of its replicas: the top-up stays pending, applied again later
            // (each shard's part once: its `topups` set).
            tracing::warn!(
                top_up = t.id,
                "a top-up's part is short of its replicas; it stays pending"
            );
            return Ok(-5);
        }
        if one < 0 {
            r = one;
            recovery.lost(
                t.voucher_id,
                if one == -4 {
                    "a shard went back in time (a top-up found it behind)"
                } else {
                    "a shard's stock is missing in Redis (a top-up found it)"
                },
            );
            break;
        }
        r = r.max(one);
    }
    Ok(r)
}

/// Finishes top-ups pending for longer than `min_age`. Returns how many it finished.
pub async fn recover(pg: &PgPool, redis: &Redis, keys: &Keys, recovery: &Recovery, min_age: Duration) -> Result<usize> {
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
        if apply(pg, redis, keys, recovery, id).await? {
            done += 1;
        }
    }
    Ok(done)
}
