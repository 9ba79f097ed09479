//! Redis going back in time: a Redis server of the test's own restarts from a
//! snapshot taken mid-sale (what a restart from an older RDB, an AOF with
//! `appendfsync everysec` or a failover to a lagging replica look like to the
//! service). Every acknowledged order must reach `created`, no shopper may hold two
//! orders, no order id, business number or fencing token may repeat, one instance
//! repairs, nothing may be stored `failed`, and persisted + remaining = stock.
use crate::faults::crowd::crowd;
use crate::fixtures::OwnRedis;
use crate::helpers::*;
use reqwest::StatusCode;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// id, user_id, status, order_no, issued_id.
type StoredOrder = (i64, i64, String, Option<String>, Option<i64>);

/// Waits until every id in `ids` is stored in Postgres.
async fn persisted(app: &TestApp, ids: &HashSet<i64>) {
    let pg = app.pg().clone();
    let ids = ids.clone();
    eventually(Duration::from_secs(60), || {
        let (pg, ids) = (pg.clone(), ids.clone());
        async move {
            let stored: HashSet<i64> = sqlx::query_scalar("SELECT id FROM voucher_orders")
                .fetch_all(&pg)
                .await
                .ok()?
                .into_iter()
                .collect();
            ids.is_subset(&stored).then_some(())
        }
    })
    .await
    .expect("every acknowledged order persisted within 60 s");
}

/// `voucher`'s orders as Postgres stores them.
async fn stored(app: &TestApp, voucher: i64) -> Vec<StoredOrder> {
    sqlx::query_as("SELECT id, user_id, status, order_no, issued_id FROM voucher_orders WHERE voucher_id = $1")
        .bind(voucher)
        .fetch_all(app.pg())
        .await
        .unwrap()
}

/// `voucher`'s stock left in Postgres.
async fn stock_in_postgres(app: &TestApp, voucher: i64) -> i32 {
    sqlx::query_scalar("SELECT stock FROM seckill_vouchers WHERE voucher_id = $1")
        .bind(voucher)
        .fetch_one(app.pg())
        .await
        .unwrap()
}

async fn numbers(app: &TestApp, tenant: i64, count: i64) -> Option<Vec<String>> {
    let (status, body) = app
        .post(
            "/api/v1/sequences/order/next",
            Some(&app.service()),
            serde_json::json!({"tenant_id": tenant.to_string(), "count": count}),
        )
        .await;
    (status == StatusCode::OK).then(|| {
        body["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    })
}

mod counters;
mod in_flight;
pub(crate) mod named;
mod postgres_back;
mod restores;
