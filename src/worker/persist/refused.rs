//! Messages the database refuses as such: their orders stored `failed`.
use super::columns::Columns;
use crate::order::OrderMsg;
use sqlx::PgPool;

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
