//! An order once it is persisted: pay and cancel (one winner when they race, the
//! shopper's lock across instances), the payment timeout that cancels unpaid orders,
//! and stock that comes back exactly once, also across duplicated timeouts, a crash
//! after a cancellation's commit and a redelivered batch.
use crate::helpers::*;
use futures::future::join_all;
use lapin::options::BasicPublishOptions;
use lapin::BasicProperties;
use reqwest::StatusCode;
use seckill::ordering::lifecycle::Canceller;
use serde_json::{json, Value};
use sqlx::Connection;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Orders as `user` and waits until the order is persisted; returns its id.
async fn created_order(app: &TestApp, v: i64, user: i64) -> String {
    let (status, body) = app.order(v, user).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["order_id"].as_str().unwrap().to_owned();
    eventually(Duration::from_secs(10), || async {
        let (_, o) = app.get(&format!("/api/v1/orders/{id}"), Some(&app.shopper(user))).await;
        (o["status"] == "created").then_some(())
    })
    .await
    .expect("order persisted");
    id
}

async fn act(app: &TestApp, id: &str, user: i64, verb: &str) -> (StatusCode, Value) {
    app.post(
        &format!("/api/v1/orders/{id}/{verb}"),
        Some(&app.shopper(user)),
        json!({}),
    )
    .await
}

async fn stocks(app: &TestApp, v: i64) -> (i64, i64) {
    let pg: i32 = sqlx::query_scalar("SELECT stock FROM seckill_vouchers WHERE voucher_id = $1")
        .bind(v)
        .fetch_one(app.pg())
        .await
        .unwrap();
    let redis = app.stats(v).await["stock_remaining"].as_i64().unwrap();
    (pg as i64, redis)
}

/// Runs `cancel` while a worker's transaction re-persists `order` (a redelivered
/// batch), interleaved deterministically on two connections: the worker's
/// transaction locks the voucher row exactly as `ordering::worker::persist` does, `cancel`
/// runs until it waits for that lock, then the worker re-inserts the order
/// (`ON CONFLICT DO NOTHING`, which waits for any open transaction that changed the
/// order's row) and commits. Returns the worker's result (rows inserted) and the
/// cancellation's.
async fn race_with_redelivered_batch<T: Send + 'static>(
    ns: &Namespace,
    app: &TestApp,
    v: i64,
    order: &str,
    user: i64,
    cancel: impl Future<Output = T> + Send + 'static,
) -> (Result<u64, String>, T) {
    let order: i64 = order.parse().unwrap();
    let mut worker = sqlx::PgConnection::connect(&ns.vars["DATABASE_URL"]).await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut worker)
        .await
        .unwrap();
    sqlx::query("BEGIN").execute(&mut worker).await.unwrap();
    sqlx::query(
        "SELECT voucher_id, stock FROM seckill_vouchers WHERE voucher_id = ANY($1) ORDER BY voucher_id FOR UPDATE",
    )
    .bind(vec![v])
    .fetch_all(&mut worker)
    .await
    .unwrap();

    let cancel = tokio::spawn(cancel);
    eventually(Duration::from_secs(10), || async {
        let waiting: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))")
                .bind(pid)
                .fetch_one(app.pg())
                .await
                .unwrap();
        (waiting > 0).then_some(())
    })
    .await
    .expect("the cancellation waits for the worker's lock on the voucher row");

    let insert = sqlx::query(
        "INSERT INTO voucher_orders (id, user_id, voucher_id, created_at, status)
         VALUES ($1, $2, $3, now(), 'created') ON CONFLICT DO NOTHING",
    )
    .bind(order)
    .bind(user)
    .bind(v)
    .execute(&mut worker);
    let inserted = match tokio::time::timeout(Duration::from_secs(30), insert)
        .await
        .expect("the worker's insert finishes")
    {
        Ok(done) => {
            sqlx::query("COMMIT").execute(&mut worker).await.unwrap();
            Ok(done.rows_affected())
        }
        Err(e) => {
            let _ = sqlx::query("ROLLBACK").execute(&mut worker).await;
            Err(e.to_string())
        }
    };
    let cancelled = tokio::time::timeout(Duration::from_secs(30), cancel)
        .await
        .expect("the cancellation finishes")
        .unwrap();
    (inserted, cancelled)
}

/// `n` concurrent `verb` requests of `user` on one order: each answer's status,
/// code and `Retry-After`, and how long the storm took.
async fn storm(
    app: &TestApp,
    id: &str,
    user: i64,
    verb: &str,
    n: usize,
) -> (Vec<(u16, String, Option<u64>)>, Duration) {
    let token = app.shopper(user);
    let url = format!("{}/api/v1/orders/{id}/{verb}", app.addr);
    let started = std::time::Instant::now();
    let answers = join_all((0..n).map(|_| async {
        let resp = app
            .client
            .post(&url)
            .bearer_auth(&token)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let retry = resp
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        (status, code(&body).to_owned(), retry)
    }))
    .await;
    (answers, started.elapsed())
}

/// Checks a storm's answers: exactly one `verb` succeeded; the rest are the
/// order's state (409), or 429 `rate_limited` with `Retry-After`; nothing else,
/// no 5xx. The limiter let at most its burst (5) plus 5 a second through, so at
/// least the others got 429.
fn check_storm(answers: &[(u16, String, Option<u64>)], took: Duration, refused: &str) {
    let ok = answers.iter().filter(|a| a.0 == 200).count();
    let limited = answers.iter().filter(|a| a.0 == 429).count();
    assert_eq!(ok, 1, "exactly one succeeds: {answers:?}");
    for a in answers {
        match (a.0, a.1.as_str()) {
            (200, _) => {}
            (409, c) if c == refused || c == "request_in_progress" => {}
            (429, "rate_limited") => assert!(a.2.is_some_and(|s| s >= 1), "429 without Retry-After: {a:?}"),
            _ => panic!("unexpected answer in a storm: {a:?}"),
        }
    }
    let passed = answers.len() - limited;
    let allowed = 5 + 5 * took.as_secs_f64().ceil() as usize;
    println!(
        "storm of {}: {ok} x 200, {} x 409, {limited} x 429 in {took:?}",
        answers.len(),
        passed - ok
    );
    assert!(
        passed <= allowed,
        "{passed} passed the limiter in {took:?} (at most {allowed})"
    );
}

mod pay_and_cancel;
mod pay_storms;
