//! Driving and checking a sale: waves of shoppers, the Redis epoch, the audit.
use super::{eventually, TestApp};
use reqwest::StatusCode;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// One order per shopper, 64 at a time; the answers by shopper.
pub async fn wave(
    app: &TestApp,
    voucher: i64,
    shoppers: impl Iterator<Item = i64>,
) -> HashMap<i64, (StatusCode, Value)> {
    wave_counted(app, voucher, shoppers, &AtomicUsize::new(0)).await
}

/// [`wave`], counting the answers in `answered` as they come.
pub async fn wave_counted(
    app: &TestApp,
    voucher: i64,
    shoppers: impl Iterator<Item = i64>,
    answered: &AtomicUsize,
) -> HashMap<i64, (StatusCode, Value)> {
    use futures::StreamExt;
    futures::stream::iter(shoppers.map(|u| async move {
        let answer = app.order(voucher, u).await;
        answered.fetch_add(1, Ordering::Relaxed);
        (u, answer)
    }))
    .buffer_unordered(64)
    .collect()
    .await
}

/// The order ids of the accepted answers, by shopper.
pub fn accepted(answers: &HashMap<i64, (StatusCode, Value)>) -> HashMap<i64, i64> {
    answers
        .iter()
        .filter(|(_, (s, _))| *s == StatusCode::ACCEPTED)
        .map(|(u, (_, b))| (*u, b["order_id"].as_str().unwrap().parse().unwrap()))
        .collect()
}

/// Waits (10 s at most) until the relay published what `outbox` held: the stream
/// is empty (with the worker frozen, the orders are then in RabbitMQ or in the
/// worker's hands only).
pub async fn wait_relayed(app: &TestApp, outbox: String) {
    let conn = app.redis().await;
    eventually(Duration::from_secs(10), || {
        let (mut conn, outbox) = (conn.clone(), outbox.clone());
        async move {
            let n: i64 = redis::cmd("XLEN").arg(&outbox).query_async(&mut conn).await.ok()?;
            (n == 0).then_some(())
        }
    })
    .await
    .expect("the relay published the orders");
}

/// Orders get answers other than 5xx again (the repair is done).
pub async fn selling_again(app: &TestApp, voucher: i64, probe_user: i64) -> (StatusCode, Value) {
    eventually(Duration::from_secs(60), || async move {
        let (s, b) = app.order(voucher, probe_user).await;
        (!s.is_server_error()).then_some((s, b))
    })
    .await
    .expect("selling again within 60 s")
}

/// How many times `voucher`'s sale was repaired (Postgres's `sale_states`).
pub async fn repairs_of(app: &TestApp, voucher: i64) -> i32 {
    sqlx::query_scalar("SELECT repairs FROM sale_states WHERE voucher_id = $1")
        .bind(voucher)
        .fetch_optional(app.pg())
        .await
        .unwrap()
        .unwrap_or(0)
}

/// Waits until `voucher`'s sale was repaired more than `before` times and is open
/// again (in Postgres's books and in this application); returns its repairs.
pub async fn repaired_after(app: &TestApp, voucher: i64, before: i32) -> i32 {
    let recovery = app.app().state().recovery.clone();
    eventually(Duration::from_secs(60), || {
        let recovery = recovery.clone();
        async move {
            let row: Option<(i32, bool)> =
                sqlx::query_as("SELECT repairs, closed_since IS NULL FROM sale_states WHERE voucher_id = $1")
                    .bind(voucher)
                    .fetch_optional(app.pg())
                    .await
                    .ok()?;
            let (repairs, open) = row?;
            (repairs > before && open && !recovery.is_closed(voucher)).then_some(repairs)
        }
    })
    .await
    .expect("the sale repaired and open again within 60 s")
}

/// The sale's audit must say its books balance (polled for a while: a return may be
/// between its Postgres and Redis halves, orders may still be on their way).
pub async fn assert_balanced(app: &TestApp, voucher: i64) {
    let path = format!("/api/v1/admin/vouchers/{voucher}/audit");
    let balanced = eventually(Duration::from_secs(20), || async {
        let (status, audit) = app.get(&path, Some(&app.admin())).await;
        (status == StatusCode::OK && audit["balanced"] == true && audit["in_flight"]["orders"] == 0).then_some(())
    })
    .await;
    if balanced.is_none() {
        let (_, audit) = app.get(&path, Some(&app.admin())).await;
        panic!("the sale's books do not balance: {audit:#}");
    }
}

/// The incidents a worker counts (`seckill_worker_incidents_total`): an id or a
/// number issued twice, an order admitted after its sale was repaired. Postgres's
/// unique indexes cannot show them (the worker stores a colliding number under a
/// fresh one); only these counters can. Reads `/metrics` of each instance at
/// `bases` and fails on any incident, or if none of them has persisted an order
/// (the check would prove nothing).
pub async fn assert_no_incidents(scenario: &str, bases: &[&str]) {
    assert_no_incidents_but(scenario, bases, &[]).await
}

/// [`assert_no_incidents`], but for incidents of the kinds `allowed` (the test
/// forces them, and reads them itself).
pub async fn assert_no_incidents_but(scenario: &str, bases: &[&str], allowed: &[&str]) {
    // `/metrics` serves a page rendered at most a second ago: after this wait,
    // every page read below was rendered after the call.
    tokio::time::sleep(seckill::metrics::RENDER_EVERY + std::time::Duration::from_millis(50)).await;
    let mut batches = 0.0;
    for base in bases {
        let text = reqwest::get(format!("{base}/metrics"))
            .await
            .and_then(|r| r.error_for_status())
            .unwrap_or_else(|e| panic!("{scenario}: metrics of {base}: {e}"));
        let text = text.text().await.unwrap();
        let value = |name: &str| -> f64 {
            text.lines()
                .filter_map(|l| l.strip_prefix(name))
                .filter_map(|v| v.trim().parse::<f64>().ok())
                .sum()
        };
        batches += value("seckill_worker_batch_orders_count");
        // Every kind, whatever it is called: a kind added later is read too.
        let incidents: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("seckill_worker_incidents_total{"))
            .filter(|l| !allowed.iter().any(|k| l.contains(&format!("kind=\"{k}\""))))
            .filter(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) != Some(0.0))
            .collect();
        assert!(
            incidents.is_empty(),
            "{scenario}: the worker at {base} met incidents: {incidents:?}"
        );
    }
    assert!(
        batches > 0.0,
        "{scenario}: no worker among {bases:?} persisted an order: its incidents prove nothing"
    );
}

/// Orders of `voucher` stored in Postgres, whatever their status (`None` while
/// Postgres does not answer).
pub async fn stored_orders(app: &TestApp, voucher: i64) -> Option<i64> {
    sqlx::query_scalar("SELECT count(*) FROM voucher_orders WHERE voucher_id = $1")
        .bind(voucher)
        .fetch_one(app.pg())
        .await
        .ok()
}

/// Until at least `n` orders of `voucher` are stored; fails after `within`, saying
/// `what` and how many there are.
pub async fn wait_stored(app: &TestApp, voucher: i64, n: i64, within: Duration, what: &str) {
    let got = eventually(within, || async {
        (stored_orders(app, voucher).await? >= n).then_some(())
    })
    .await;
    assert!(
        got.is_some(),
        "{what}: {n} orders stored within {within:?}, have {:?}",
        stored_orders(app, voucher).await
    );
}
