//! A sale's stock in Postgres (`seckill_vouchers.stock`: its total less its live
//! orders), as the worker reads, locks and takes it in the transaction that stores
//! a batch, as a cancel locks it and gives a unit back, and as a repair reads it.
use sqlx::{PgConnection, PgExecutor};
use std::collections::HashMap;

/// The stock of `voucher`.
pub async fn of(db: impl PgExecutor<'_>, voucher: i64) -> Result<i32, sqlx::Error> {
    sqlx::query_scalar("SELECT stock FROM seckill_vouchers WHERE voucher_id = $1")
        .bind(voucher)
        .fetch_one(db)
        .await
}

/// The stock of each of `vouchers`, as last committed, without locking anything.
pub async fn read(tx: &mut PgConnection, vouchers: &[i64]) -> Result<HashMap<i64, i32>, sqlx::Error> {
    Ok(
        sqlx::query_as("SELECT voucher_id, stock FROM seckill_vouchers WHERE voucher_id = ANY($1)")
            .bind(vouchers)
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .collect(),
    )
}

/// Locks the rows of `vouchers` (in id order, whatever the order given: two transactions never
/// wait on each other in a cycle) and returns the stock of each.
pub async fn lock(tx: &mut PgConnection, vouchers: &[i64]) -> Result<HashMap<i64, i32>, sqlx::Error> {
    Ok(sqlx::query_as(
        "SELECT voucher_id, stock FROM seckill_vouchers WHERE voucher_id = ANY($1) ORDER BY voucher_id FOR UPDATE",
    )
    .bind(vouchers)
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .collect())
}

/// Takes `units` (per voucher) from the stock.
pub async fn take(tx: &mut PgConnection, units: HashMap<i64, i32>) -> Result<(), sqlx::Error> {
    if units.is_empty() {
        return Ok(());
    }
    let (v, n): (Vec<i64>, Vec<i32>) = units.into_iter().unzip();
    sqlx::query(
        "UPDATE seckill_vouchers s SET stock = s.stock - d.n
           FROM UNNEST($1::bigint[], $2::int[]) AS d(voucher_id, n)
          WHERE s.voucher_id = d.voucher_id",
    )
    .bind(&v)
    .bind(&n)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Locks the row of `voucher` (whose stock a cancel is about to give a unit back
/// to), if there is one.
pub async fn lock_one(tx: &mut PgConnection, voucher: i64) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT stock FROM seckill_vouchers WHERE voucher_id = $1 FOR UPDATE")
        .bind(voucher)
        .fetch_optional(&mut *tx)
        .await?;
    Ok(())
}

/// Gives one unit back to the stock of `voucher` (a cancelled order's).
pub async fn give_back_one(tx: &mut PgConnection, voucher: i64) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE seckill_vouchers SET stock = stock + 1 WHERE voucher_id = $1")
        .bind(voucher)
        .execute(&mut *tx)
        .await?;
    Ok(())
}
