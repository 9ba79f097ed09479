//! What Postgres holds of a sale's orders, for the areas that count them (a
//! repair's snapshot of a sale, its books, the admin's view of it, a queue's
//! frontier).
use sqlx::PgExecutor;

/// One order Postgres holds.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Stored {
    pub id: i64,
    /// The id its shopper holds, when it was stored under a fresh one.
    pub issued_id: Option<i64>,
    pub user_id: i64,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub status: String,
}

/// Every order of the sale `voucher` that Postgres holds (any status).
pub async fn of_sale(db: impl PgExecutor<'_>, voucher: i64) -> Result<Vec<Stored>, sqlx::Error> {
    sqlx::query_as("SELECT id, issued_id, user_id, created_at, status FROM voucher_orders WHERE voucher_id = $1")
        .bind(voucher)
        .fetch_all(db)
        .await
}

/// A sale's orders in Postgres by status.
#[derive(Clone, Copy, Debug, Default, sqlx::FromRow)]
pub struct StatusCounts {
    pub created: i64,
    pub paid: i64,
    pub cancelled: i64,
    /// Orders Redis admitted that the database refused (incidents).
    pub failed: i64,
}

/// The sale's orders in Postgres, counted by status.
pub async fn counts_of_sale(db: impl PgExecutor<'_>, voucher: i64) -> Result<StatusCounts, sqlx::Error> {
    sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status = 'created')   AS created,
                count(*) FILTER (WHERE status = 'paid')      AS paid,
                count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
                count(*) FILTER (WHERE status = 'failed')    AS failed
           FROM voucher_orders WHERE voucher_id = $1",
    )
    .bind(voucher)
    .fetch_one(db)
    .await
}

/// Cancellations of the sale whose unit is not back in Redis yet (their stock
/// return not done).
pub async fn returns_pending(db: impl PgExecutor<'_>, voucher: i64) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM stock_returns WHERE voucher_id = $1 AND done_at IS NULL")
        .bind(voucher)
        .fetch_one(db)
        .await
}

/// Orders of the sale persisted (failed ones excluded).
pub async fn persisted_of_sale(db: impl PgExecutor<'_>, voucher: i64) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM voucher_orders WHERE voucher_id = $1 AND status <> 'failed'")
        .bind(voucher)
        .fetch_one(db)
        .await
}

/// Orders of the sale the payment timeout cancelled.
pub async fn timed_out_of_sale(db: impl PgExecutor<'_>, voucher: i64) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT count(*) FROM voucher_orders
          WHERE voucher_id = $1 AND status = 'cancelled' AND cancelled_by = 'timeout'",
    )
    .bind(voucher)
    .fetch_one(db)
    .await
}

/// For a statement on a queue's places `q`: whether the place's shopper has a
/// live order (created or paid) of the place's sale.
pub const LIVE_ORDER_OF_PLACE: &str = "EXISTS (SELECT 1 FROM voucher_orders o
                         WHERE o.user_id = q.user_id AND o.voucher_id = q.voucher_id
                           AND o.status IN ('created', 'paid'))";
