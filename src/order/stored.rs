//! What Postgres holds of a sale's orders, for the areas that count them (a
//! repair's snapshot of a sale).
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
