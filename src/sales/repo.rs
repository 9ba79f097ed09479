//! Postgres queries for vouchers.
use super::model::{FlashSale, NewVoucher, Voucher, MAX_STOCK};
use crate::admission::Mode;
use chrono::{DateTime, Utc};
use sqlx::{postgres::PgRow, PgExecutor, Row};
use std::sync::LazyLock;

/// A voucher's row: the voucher, its sale, and its sale's queue (the admission
/// area's columns, joined as it says).
static SELECT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT v.id, v.shop_id, v.title, v.sub_title, v.rules, v.pay_value, v.actual_value,
        v.created_at, s.total_stock, s.begin_at, s.end_at, coalesce(s.paused, false) AS paused, s.stock_shards,
        s.admission, s.turn_secs, s.draw_at, s.pow_difficulty, s.address_cap, {QUEUE}
   FROM vouchers v LEFT JOIN seckill_vouchers s ON s.voucher_id = v.id {JOIN_QUEUE}",
        QUEUE = crate::admission::sql::QUEUE_COLUMNS,
        JOIN_QUEUE = crate::admission::sql::JOIN_QUEUE_OF_VOUCHER
    )
});

fn from_row(row: &PgRow) -> Result<Voucher, sqlx::Error> {
    let total: Option<i32> = row.try_get("total_stock")?;
    let begin_at: Option<DateTime<Utc>> = row.try_get("begin_at")?;
    let end_at: Option<DateTime<Utc>> = row.try_get("end_at")?;
    let shards: Option<i32> = row.try_get("stock_shards")?;
    let flash = match (total, begin_at, end_at) {
        (Some(stock), Some(begin_at), Some(end_at)) => Some(FlashSale {
            stock,
            begin_at,
            end_at,
            stock_shards: shards.unwrap_or(1),
            // An admission this build does not know fails the read (closed), never
            // first come.
            admission: match row.try_get::<Option<String>, _>("admission")?.as_deref() {
                None => Mode::FirstCome,
                Some(name) => Mode::parse(name)
                    .ok_or_else(|| sqlx::Error::Decode(format!("unknown admission {name:?}").into()))?,
            },
            admit_rate: row.try_get("admit_rate")?,
            turn_secs: row.try_get("turn_secs")?,
            draw_at: row.try_get("draw_at")?,
            pow_difficulty: row.try_get::<Option<i32>, _>("pow_difficulty")?.unwrap_or(0),
            address_cap: row.try_get("address_cap")?,
            queue_paused_ms: row.try_get::<Option<i64>, _>("queue_paused_ms")?.unwrap_or(0),
        }),
        _ => None,
    };
    Ok(Voucher {
        id: row.try_get("id")?,
        shop_id: row.try_get("shop_id")?,
        title: row.try_get("title")?,
        sub_title: row.try_get("sub_title")?,
        rules: row.try_get("rules")?,
        pay_value: row.try_get("pay_value")?,
        actual_value: row.try_get("actual_value")?,
        flash,
        paused: row.try_get("paused")?,
        created_at: row.try_get("created_at")?,
    })
}

/// Inserts a voucher (and its flash-sale row) and returns it.
pub async fn insert(tx: &mut sqlx::PgConnection, v: &NewVoucher) -> Result<Voucher, sqlx::Error> {
    let (id, created_at): (i64, DateTime<Utc>) = sqlx::query_as(
        "INSERT INTO vouchers (shop_id, title, sub_title, rules, pay_value, actual_value)
         VALUES ($1, $2, $3, $4, $5, $6) RETURNING id, created_at",
    )
    .bind(v.shop_id)
    .bind(&v.title)
    .bind(&v.sub_title)
    .bind(&v.rules)
    .bind(v.pay_value)
    .bind(v.actual_value)
    .fetch_one(&mut *tx)
    .await?;
    if let Some(f) = &v.flash {
        sqlx::query(
            "INSERT INTO seckill_vouchers (voucher_id, stock, total_stock, begin_at, end_at, stock_shards,
                                           admission, turn_secs, draw_at, pow_difficulty, address_cap)
             VALUES ($1, $2, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(id)
        .bind(f.stock)
        .bind(f.begin_at)
        .bind(f.end_at)
        .bind(f.stock_shards)
        .bind(f.admission.as_str())
        .bind(f.turn_secs)
        .bind(f.draw_at)
        .bind(f.pow_difficulty)
        .bind(f.address_cap)
        .execute(&mut *tx)
        .await?;
        match f.admission {
            Mode::FirstCome => {}
            Mode::Queue => crate::admission::queue::create(tx, id, f.admit_rate.unwrap_or(1), f.begin_at).await?,
            Mode::Raffle => {
                let beacon = v
                    .beacon
                    .as_ref()
                    .ok_or_else(|| sqlx::Error::Protocol("a raffle sale without its beacon".into()))?;
                crate::admission::raffle::create(tx, id, beacon).await?;
            }
        }
    }
    Ok(Voucher {
        id,
        shop_id: v.shop_id,
        title: v.title.clone(),
        sub_title: v.sub_title.clone(),
        rules: v.rules.clone(),
        pay_value: v.pay_value,
        actual_value: v.actual_value,
        flash: v.flash.clone(),
        paused: false,
        created_at,
    })
}

pub async fn get(db: impl PgExecutor<'_>, id: i64) -> Result<Option<Voucher>, sqlx::Error> {
    sqlx::query(&format!("{} WHERE v.id = $1", *SELECT))
        .bind(id)
        .try_map(|r: PgRow| from_row(&r))
        .fetch_optional(db)
        .await
}

/// One page of a shop's vouchers in id order: those with an id above `after` (all
/// if None), at most `limit`.
pub async fn list_by_shop(
    db: impl PgExecutor<'_>,
    shop_id: i64,
    after: Option<i64>,
    limit: i64,
) -> Result<Vec<Voucher>, sqlx::Error> {
    sqlx::query(&format!(
        "{} WHERE v.shop_id = $1 AND ($2::bigint IS NULL OR v.id > $2) ORDER BY v.id LIMIT $3",
        *SELECT
    ))
    .bind(shop_id)
    .bind(after)
    .bind(limit)
    .try_map(|r: PgRow| from_row(&r))
    .fetch_all(db)
    .await
}

/// One page of every voucher, newest first: those with an id below `before` (all
/// if None), at most `limit`.
pub async fn page(db: impl PgExecutor<'_>, before: Option<i64>, limit: i64) -> Result<Vec<Voucher>, sqlx::Error> {
    sqlx::query(&format!(
        "{} WHERE ($1::bigint IS NULL OR v.id < $1) ORDER BY v.id DESC LIMIT $2",
        *SELECT
    ))
    .bind(before)
    .bind(limit)
    .try_map(|r: PgRow| from_row(&r))
    .fetch_all(db)
    .await
}

/// Pauses or resumes a flash sale. `None` if there is no flash sale with this id
/// (the caller tells a missing voucher from an ordinary one).
pub async fn set_paused(tx: &mut sqlx::PgConnection, id: i64, paused: bool) -> Result<Option<()>, sqlx::Error> {
    let done = sqlx::query("UPDATE seckill_vouchers SET paused = $2 WHERE voucher_id = $1")
        .bind(id)
        .bind(paused)
        .execute(&mut *tx)
        .await?;
    if done.rows_affected() == 0 {
        return Ok(None);
    }
    sqlx::query("UPDATE vouchers SET updated_at = now() WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    // A queue's clock stops with its sale and goes on where it stopped: the
    // trigger of `migrations/0025_queue_clock.sql` keeps it with `paused`.
    Ok(Some(()))
}

/// The ids of the paused flash sales (the cache's once-a-second check).
pub async fn paused_ids(db: impl PgExecutor<'_>) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar("SELECT voucher_id FROM seckill_vouchers WHERE paused ORDER BY voucher_id")
        .fetch_all(db)
        .await
}

/// Every voucher, for the in-process cache.
pub async fn all(db: impl PgExecutor<'_>) -> Result<Vec<Voucher>, sqlx::Error> {
    sqlx::query(&SELECT)
        .try_map(|r: PgRow| from_row(&r))
        .fetch_all(db)
        .await
}

/// What [`add_stock`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Added {
    Added,
    NotAFlashSale,
    /// The total stock would pass [`MAX_STOCK`]: nothing added.
    OverLimit,
    /// A raffle past its `draw_at`: its number of winners is fixed (nothing added).
    RaffleClosed,
}

/// Adds `n` units to a flash sale in Postgres, unless its total would pass
/// [`MAX_STOCK`]. The limit is checked by the UPDATE itself, on the row it locks:
/// concurrent top-ups are checked one after the other against the total each
/// leaves, so together they cannot pass it (a check read before the UPDATE let
/// them all through, and their sum past `int4` was a 500). The sum is computed in
/// `bigint`, so no total overflows.
pub async fn add_stock(tx: &mut sqlx::PgConnection, id: i64, n: i32) -> Result<Added, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE seckill_vouchers SET stock = stock + $2, total_stock = total_stock + $2
          WHERE voucher_id = $1 AND total_stock::bigint + $2 <= $3
            AND NOT (admission = 'raffle' AND draw_at IS NOT NULL AND clock_timestamp() >= draw_at)",
    )
    .bind(id)
    .bind(n)
    .bind(MAX_STOCK)
    .execute(&mut *tx)
    .await;
    // The trigger of migration 0026: draw_at passed between the WHERE and it (the
    // transaction is aborted; the caller answers and drops it).
    let done = match done {
        Err(sqlx::Error::Database(db))
            if db.code().as_deref() == Some("23514") && db.message().contains("fixed at its draw_at") =>
        {
            return Ok(Added::RaffleClosed)
        }
        done => done?,
    };
    if done.rows_affected() == 0 {
        let closed: Option<bool> = sqlx::query_scalar(
            "SELECT admission = 'raffle' AND draw_at IS NOT NULL AND clock_timestamp() >= draw_at
               FROM seckill_vouchers WHERE voucher_id = $1",
        )
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        return Ok(match closed {
            Some(true) => Added::RaffleClosed,
            Some(false) => Added::OverLimit,
            None => Added::NotAFlashSale,
        });
    }
    sqlx::query("UPDATE vouchers SET updated_at = now() WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    Ok(Added::Added)
}

/// A voucher's flash-sale totals, `(total_stock, stock)` (both `None` for an
/// ordinary voucher), or `None` if there is no such voucher.
pub async fn stock_totals(db: impl PgExecutor<'_>, id: i64) -> Result<Option<(Option<i64>, Option<i64>)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT s.total_stock::int8, s.stock::int8
           FROM vouchers v LEFT JOIN seckill_vouchers s ON s.voucher_id = v.id
          WHERE v.id = $1",
    )
    .bind(id)
    .fetch_optional(db)
    .await
}

/// A flash sale's `stock_shards`, or `None` if the voucher is not a flash sale (or
/// does not exist).
pub async fn flash_shards(db: impl PgExecutor<'_>, id: i64) -> Result<Option<u32>, sqlx::Error> {
    let n: Option<i32> = sqlx::query_scalar("SELECT stock_shards FROM seckill_vouchers WHERE voucher_id = $1")
        .bind(id)
        .fetch_optional(db)
        .await?;
    Ok(n.map(|n| n.max(1) as u32))
}

/// A flash sale's `stock_shards` (1 if it is not one).
pub async fn shards(db: impl PgExecutor<'_>, id: i64) -> Result<u32, sqlx::Error> {
    let n: Option<i32> = sqlx::query_scalar("SELECT stock_shards FROM seckill_vouchers WHERE voucher_id = $1")
        .bind(id)
        .fetch_optional(db)
        .await?;
    Ok(n.unwrap_or(1).max(1) as u32)
}
