//! Messages the database refuses as such: their orders stored `failed`.
use super::columns::Columns;
use super::conflicts::existing;
use crate::ordering::OrderMsg;
use sqlx::PgPool;
use std::collections::HashSet;

/// Stores orders as `failed` with `reason` (a message the database refuses as
/// such). An order stored already (the same id, shopper and voucher) is skipped;
/// one whose id another order holds (ids issued twice) is stored under a fresh id,
/// `issued_id` the one its shopper holds, never skipped. Returns how many were
/// stored.
pub async fn store_failed(pg: &PgPool, orders: &[OrderMsg], reason: &str) -> Result<usize, sqlx::Error> {
    let mut seen = HashSet::new();
    let orders: Vec<&OrderMsg> = orders.iter().filter(|o| seen.insert(o.key())).collect();
    let mut cols = Columns::default();
    for o in &orders {
        cols.push(o, Some(reason.to_owned()), None);
    }
    let mut conn = pg.acquire().await?;
    let inserted = cols.insert(&mut conn).await?;
    let left: Vec<&OrderMsg> = orders
        .into_iter()
        .filter(|o| !inserted.contains_key(&o.key()))
        .collect();
    if left.is_empty() {
        return Ok(inserted.len());
    }
    let ids: Vec<i64> = left.iter().map(|o| o.id.get()).collect();
    let stored = existing(&mut conn, &ids).await?;
    let mut again = Columns::default();
    for o in left.into_iter().filter(|o| !stored.contains(&o.key())) {
        let fresh: i64 = sqlx::query_scalar("SELECT (1::bigint << 62) + nextval('order_reissued_ids')")
            .fetch_one(&mut *conn)
            .await?;
        tracing::error!(
            order_id = o.id.get(),
            user_id = o.user_id.get(),
            voucher_id = o.voucher_id.get(),
            "INCIDENT: another order already had this id (ids issued twice); stored failed under a fresh id"
        );
        again.push_as(o, fresh, Some(reason.to_owned()), None);
    }
    Ok(inserted.len() + again.insert(&mut conn).await?.len())
}
