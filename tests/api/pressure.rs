//! A Redis that is the right server but cannot take a write for now: out of memory
//! (`maxmemory` with `noeviction`: `OOM`), too few replicas (`min-replicas-to-write`:
//! `NOREPLICAS`), busy running a script (`BUSY`). Orders answer 503 `unavailable`
//! with `Retry-After`, never 500, and sell on with exact stock once it passes; the
//! connection is kept (it talks to the server we know). Each on a server of the
//! test's own.
use crate::faults::crowd::{settle, Tally};
use crate::fixtures::OwnRedis;
use crate::helpers::*;
use reqwest::StatusCode;
use seckill::redis_conn::{is_transient, Redis};
fn breaks_connection(_: &redis::RedisError) -> bool {
    false
}
use std::process::{Child, Command};
use std::time::Duration;

/// An order's status, `Retry-After`, error code and order id.
async fn order_answer(app: &TestApp, voucher: i64, user: i64) -> (StatusCode, Option<String>, String, Option<i64>) {
    let resp = app
        .client
        .post(format!("{}/api/v1/vouchers/{voucher}/orders", app.addr))
        .bearer_auth(app.shopper(user))
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .map(|h| h.to_str().unwrap().to_owned());
    let body: serde_json::Value = resp.json().await.unwrap_or_default();
    let order = body["order_id"].as_str().and_then(|s| s.parse().ok());
    (status, retry_after, code(&body).to_owned(), order)
}

/// The three states, each put on and taken off the server with `redis-cli`.
const STATES: [&str; 3] = ["OOM", "NOREPLICAS", "BUSY"];

/// Puts `state` on the server; returns the busy script's `redis-cli` for BUSY.
fn begin(redis: &OwnRedis, state: &str) -> Option<Child> {
    let set = |k: &str, v: &str| assert_eq!(redis.cli(&["CONFIG", "SET", k, v]).as_deref(), Some("OK"));
    match state {
        "OOM" => {
            set("maxmemory-policy", "noeviction");
            set("maxmemory", "1");
            None
        }
        "NOREPLICAS" => {
            set("min-replicas-to-write", "1");
            None
        }
        _ => {
            // A script that never ends: after 100 ms every other command answers BUSY.
            set("busy-reply-threshold", "100");
            let port = redis.url().rsplit(':').next().unwrap().to_owned();
            let child = Command::new("redis-cli")
                .args(["-p", &port, "EVAL", "while true do end", "0"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("redis-cli");
            let busy = crate::fixtures::wait_until(Duration::from_secs(10), || {
                redis.cli(&["PING"]).is_some_and(|r| r.starts_with("BUSY"))
            });
            assert!(busy, "the server answers BUSY while the script runs");
            Some(child)
        }
    }
}

/// Takes `state` off the server again.
fn end(redis: &OwnRedis, state: &str, busy: Option<Child>) {
    let set = |k: &str, v: &str| assert_eq!(redis.cli(&["CONFIG", "SET", k, v]).as_deref(), Some("OK"));
    match state {
        "OOM" => set("maxmemory", "0"),
        "NOREPLICAS" => set("min-replicas-to-write", "0"),
        _ => {
            assert_eq!(redis.cli(&["SCRIPT", "KILL"]).as_deref(), Some("OK"));
            busy.expect("the busy script").wait().unwrap();
        }
    }
}

/// The handle itself: a write refused with OOM, NOREPLICAS or BUSY (plain, and
/// from a script's `redis.call`) is transient, does not break the connection, and
/// the next caller gets the same connection (the same `CLIENT ID`), which works
/// again once the state passed.
#[tokio::test]
async fn a_full_memory_too_few_replicas_or_a_busy_script_keep_the_connection() {
    let redis = OwnRedis::snapshots_only();
    let handle = Redis::new(&redis.url(), false, Duration::from_secs(5)).unwrap();
    let client_id = |handle: Redis| async move {
        let mut conn = handle.conn().await.expect("connected");
        redis::cmd("CLIENT")
            .arg("ID")
            .query_async::<i64>(&mut conn)
            .await
            .unwrap()
    };
    let first = client_id(handle.clone()).await;
    for state in STATES {
        let busy = begin(&redis, state);
        let mut conn = handle.conn().await.expect("connected");
        let plain: redis::RedisResult<()> = redis::cmd("SET").arg("k").arg(1).query_async(&mut conn).await;
        let script: redis::RedisResult<()> = redis::cmd("EVAL")
            .arg("return redis.call('SET', KEYS[1], 2)")
            .arg(1)
            .arg("k")
            .query_async(&mut conn)
            .await;
        for (what, r) in [("SET", plain), ("a script's SET", script)] {
            let e = r.expect_err(state);
            assert!(
                e.code() == Some(state) || e.to_string().contains(state),
                "{state}, {what}: {e}"
            );
            assert!(is_transient(&e), "{state}, {what}: transient: {e}");
            assert!(!breaks_connection(&e), "{state}, {what}: keeps the connection: {e}");
        }
        end(&redis, state, busy);
        assert_eq!(client_id(handle.clone()).await, first, "{state}: the same connection");
    }
    let mut conn = handle.conn().await.unwrap();
    let () = redis::cmd("SET").arg("k").arg(3).query_async(&mut conn).await.unwrap();
}

/// A sale whose Redis runs out of memory, then loses its replicas, then runs a
/// script that does not end: every order in each state answers 503 `unavailable`
/// with `Retry-After` (they used to answer 500 `internal`), and in between and after
/// the sale sells on until exactly its stock is sold. Every answer is counted: no 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_memory_too_few_replicas_or_a_busy_script_answer_503_never_500() {
    let ns = Namespace::new().await;
    let redis = OwnRedis::aof_always();
    let app = TestApp::builder(&ns).env("REDIS_URL", redis.url()).spawn().await;
    let stock = 12;
    let v = app.flash_sale(stock).await;
    let first = selling_again(&app, v, 1).await;
    assert_eq!(first.0, StatusCode::ACCEPTED, "{}", first.1);
    let mut tally = Tally::default();
    tally
        .acknowledged
        .insert(first.1["order_id"].as_str().unwrap().parse().unwrap());
    *tally.statuses.entry(202).or_default() += 1;
    let mut user = 1;
    let mut in_states = 0;
    for state in STATES {
        let busy = begin(&redis, state);
        for _ in 0..5 {
            user += 1;
            let (status, retry_after, code, _) = order_answer(&app, v, user).await;
            *tally.statuses.entry(status.as_u16()).or_default() += 1;
            in_states += 1;
            assert_eq!(
                (status, code.as_str()),
                (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
                "{state}: an order"
            );
            assert!(retry_after.is_some(), "{state}: 503 without Retry-After");
        }
        end(&redis, state, busy);
        // Sells again at once: the connection was kept, nothing to repair.
        user += 1;
        let (status, _, code, order) = order_answer(&app, v, user).await;
        *tally.statuses.entry(status.as_u16()).or_default() += 1;
        tally.acknowledged.extend(order);
        assert_eq!(status, StatusCode::ACCEPTED, "after {state}: {code}");
    }
    // The rest of the stock, then sold out.
    loop {
        user += 1;
        let (status, _, code, order) = order_answer(&app, v, user).await;
        *tally.statuses.entry(status.as_u16()).or_default() += 1;
        tally.acknowledged.extend(order);
        assert!(status == StatusCode::ACCEPTED || code == "sold_out", "{status} {code}");
        if code == "sold_out" {
            break;
        }
    }
    let statuses = &tally.statuses;
    println!("OOM, NOREPLICAS, BUSY: {in_states} orders in those states; answers by status: {statuses:?}");
    assert_eq!(statuses.get(&500), None, "no 500: {statuses:?}");
    assert_eq!(
        statuses.get(&202).copied(),
        Some(stock as usize),
        "exactly the stock sold"
    );
    assert_eq!(tally.acknowledged.len(), stock as usize, "an order id with every 202");
    settle("OOM, NOREPLICAS, BUSY", &app, v, stock, &tally).await;
}
