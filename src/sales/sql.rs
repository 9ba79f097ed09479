//! The sales tables as other areas read them inside their own transactions or
//! statements: a raffle's close reads its sale's clock and stock in the
//! transaction that closes it; a raffle's entry checks its sale's `draw_at` in the
//! statement that holds the raffle's row. The sales area says how.
use sqlx::PgConnection;

/// Joins, to a statement on raffles `r`, the row of the raffle's sale as `s`
/// (its `draw_at`, `total_stock`).
pub const JOIN_SALE_OF_RAFFLE: &str = "JOIN seckill_vouchers s ON s.voucher_id = r.voucher_id";

/// Whether the sale's `draw_at` has passed, by Postgres's clock.
pub async fn draw_due(tx: &mut PgConnection, voucher: i64) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT clock_timestamp() >= draw_at FROM seckill_vouchers WHERE voucher_id = $1")
        .bind(voucher)
        .fetch_one(tx)
        .await
}

/// The sale's total stock, its row held in share mode until `tx` ends: a top-up
/// that has not committed is waited for.
pub async fn total_stock_shared(tx: &mut PgConnection, voucher: i64) -> Result<i32, sqlx::Error> {
    sqlx::query_scalar("SELECT total_stock FROM seckill_vouchers WHERE voucher_id = $1 FOR SHARE")
        .bind(voucher)
        .fetch_one(tx)
        .await
}
