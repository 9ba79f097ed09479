//! The repair's barrier (issue: the repair decided on silence). Orders a relay
//! published before a repair and no worker has stored yet are in RabbitMQ or in a
//! worker's hands, where no queue count shows them all; the repair must wait for each
//! of them, however long, rather than rebuild without them and sell their units and
//! shoppers again. Each test: a `seckill worker` process of its own, a Redis server
//! of its own, and an event that makes the service repair while orders are out of
//! reach. Each asserts: no shopper gets a second 202, nothing is stored `failed`, no
//! business number twice, Postgres stock = 0 once sold out (persisted + remaining =
//! stock), the audit balanced, and prints how long the sale was closed.
use crate::fixtures::{signal, spawn_worker_binary, OwnRedis};
use crate::helpers::*;
use reqwest::StatusCode;
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// A sale of `stock` on `redis`, a worker process of its own (frozen by the caller),
/// and the first `first` shoppers' orders published to it: out of Redis's outbox,
/// not ready in the queue, not in Postgres.
pub(crate) struct Setup {
    pub ns: Namespace,
    pub app: TestApp,
    pub worker: std::process::Child,
    pub v: i64,
    pub first: HashSet<i64>,
}

/// The worker process goes with the setup, also when an assertion fails first.
impl Drop for Setup {
    fn drop(&mut self) {
        let _ = self.worker.kill();
        let _ = self.worker.wait();
    }
}

pub(crate) async fn setup(redis: &OwnRedis, stock: i64, first: i64, before_orders: impl FnOnce()) -> Setup {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns)
        .env("REDIS_URL", redis.url())
        .worker(false)
        .spawn()
        .await;
    let v = app.flash_sale(stock).await;
    let env = [("REDIS_URL", redis.url()), ("SECKILL_REDIS_CLUSTER", "false".into())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let worker = spawn_worker_binary(&ns, &env).await;
    before_orders();
    signal(&worker, "STOP");
    let answers = wave(&app, v, 1..=first).await;
    let ids: HashSet<i64> = accepted(&answers).into_values().collect();
    assert_eq!(ids.len() as i64, first, "the first shoppers' orders accepted");
    wait_relayed(&app, ns.keys().outbox(v)).await;
    let in_pg: i64 = sqlx::query_scalar("SELECT count(*) FROM voucher_orders WHERE voucher_id = $1")
        .bind(v)
        .fetch_one(app.pg())
        .await
        .unwrap();
    assert_eq!(in_pg, 0, "the setup: the first orders not in Postgres yet");
    Setup {
        ns,
        app,
        worker,
        v,
        first: ids,
    }
}

/// While the frozen worker holds the first orders, for `hold`: every order answer is
/// 503 (closed), never a 202 to a first shopper or anyone else. Then the admin view
/// must show the repair waiting for them.
async fn closed_while_frozen(s: &Setup, hold: Duration, first: i64) {
    let until = Instant::now() + hold;
    let mut probe = 0;
    while Instant::now() < until {
        // A first shopper and a new one, in turn.
        let user = if probe % 2 == 0 {
            1 + probe / 2 % first
        } else {
            10_000 + probe
        };
        let (status, body) = s.app.order(s.v, user).await;
        assert!(
            status == StatusCode::SERVICE_UNAVAILABLE,
            "shopper {user} answered {status} while the worker held the first orders: {body}"
        );
        probe += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, state) = s.app.get("/api/v1/admin/redis", Some(&s.app.admin())).await;
    assert_eq!(status, StatusCode::OK, "{state}");
    assert_eq!(state["repairing"], true, "{state}");
    assert_eq!(state["repair_waiting_orders"], first, "{state}");
}

/// After the worker is back: the sale sells again; the first shoppers are told they
/// already ordered; a crowd takes exactly the rest; every order is stored once.
pub(crate) async fn sells_the_rest_exactly(s: &Setup, stock: i64, first: i64, closed_since: Instant, scenario: &str) {
    selling_again(&s.app, s.v, 1).await;
    println!(
        "{scenario}: the sale was closed {} ms",
        closed_since.elapsed().as_millis()
    );
    let again = wave(&s.app, s.v, 1..=first).await;
    let twice: Vec<i64> = accepted(&again).into_keys().collect();
    assert!(twice.is_empty(), "{scenario}: shoppers sold twice: {twice:?}");
    let rest = accepted(&wave(&s.app, s.v, 1000..1000 + 2 * stock).await);
    assert_eq!(
        rest.len() as i64,
        stock - first,
        "{scenario}: exactly the stock that was left"
    );
    let all: HashSet<i64> = s.first.iter().chain(rest.values()).copied().collect();
    wait_stored(&s.app, s.v, stock, Duration::from_secs(30), scenario).await;
    let rows: Vec<(i64, String, Option<String>)> =
        sqlx::query_as("SELECT id, status, order_no FROM voucher_orders WHERE voucher_id = $1")
            .bind(s.v)
            .fetch_all(s.app.pg())
            .await
            .unwrap();
    let ids: HashSet<i64> = rows.iter().map(|r| r.0).collect();
    assert_eq!(ids, all, "{scenario}: exactly the acknowledged orders are stored");
    assert!(
        rows.iter().all(|r| r.1 == "created"),
        "{scenario}: nothing failed: {rows:?}"
    );
    let numbers: HashSet<&str> = rows.iter().filter_map(|r| r.2.as_deref()).collect();
    assert_eq!(numbers.len() as i64, stock, "{scenario}: no business number twice");
    let pg_stock: i32 = sqlx::query_scalar("SELECT stock FROM seckill_vouchers WHERE voucher_id = $1")
        .bind(s.v)
        .fetch_one(s.app.pg())
        .await
        .unwrap();
    assert_eq!(pg_stock, 0, "{scenario}: persisted + remaining = stock");
    assert_balanced(&s.app, s.v).await;
    let _ = &s.ns;
}

/// Redis restarts with all of its data (AOF, fsync always) while the worker is frozen
/// holding the first orders: the service cannot tell the restart from a loss by
/// identity alone and repairs; the repair must wait for the frozen worker, however
/// long, not resell the first shoppers' units.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restart_with_all_data_while_a_worker_is_frozen_resells_nothing() {
    let mut redis = OwnRedis::aof_always();
    let (stock, first) = (60, 20);
    let mut s = setup(&redis, stock, first, || {}).await;
    redis.crash_and_restart();
    let closed_since = Instant::now();
    // Longer than any "worker seen lately" window.
    closed_while_frozen(&s, Duration::from_secs(7), first).await;
    signal(&s.worker, "CONT");
    sells_the_rest_exactly(&s, stock, first, closed_since, "restart with all data").await;
    let _ = s.worker.kill();
    let _ = s.worker.wait();
}

/// Redis restarts from a snapshot taken before the first orders while the worker is
/// frozen holding them: Redis has forgotten them, and only the worker has them. The
/// repair must wait for them to be stored and rebuild the sale with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rollback_while_a_worker_is_frozen_resells_nothing() {
    let mut redis = OwnRedis::snapshots_only();
    let (stock, first) = (60, 20);
    let mut s = setup(&redis, stock, first, || redis.snapshot()).await;
    redis.crash_and_restart();
    let closed_since = Instant::now();
    closed_while_frozen(&s, Duration::from_secs(7), first).await;
    signal(&s.worker, "CONT");
    sells_the_rest_exactly(&s, stock, first, closed_since, "rollback").await;
    let _ = s.worker.kill();
    let _ = s.worker.wait();
}

/// No worker alive at all (killed) while Redis restarts: the published orders sit in
/// the queue. The sale waits, the operator sees why, nothing is resold; a worker
/// started later stores them and the sale sells again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_repair_with_no_worker_alive_waits_and_shows_why() {
    let mut redis = OwnRedis::snapshots_only();
    let (stock, first) = (40, 10);
    let mut s = setup(&redis, stock, first, || redis.snapshot()).await;
    let _ = s.worker.kill();
    let _ = s.worker.wait();
    redis.crash_and_restart();
    let closed_since = Instant::now();
    closed_while_frozen(&s, Duration::from_secs(3), first).await;
    let (_, state) = s.app.get("/api/v1/admin/redis", Some(&s.app.admin())).await;
    println!("admin view with no worker: {state}");
    assert!(
        state["repair_reason"]
            .as_str()
            .is_some_and(|r| r.contains("order(s) published before")),
        "{state}"
    );
    let env = [("REDIS_URL", redis.url()), ("SECKILL_REDIS_CLUSTER", "false".into())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    s.worker = spawn_worker_binary(&s.ns, &env).await;
    sells_the_rest_exactly(&s, stock, first, closed_since, "no worker alive").await;
    let _ = s.worker.kill();
    let _ = s.worker.wait();
}

/// Orders published before a repair that can never arrive (here: the queue purged
/// with no worker, as a broker that lost its disk would lose them): the repair waits
/// until an operator abandons them, and not a moment before; then the sale sells
/// again. An abandon for another epoch is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_abandons_what_a_repair_waits_for() {
    let mut redis = OwnRedis::snapshots_only();
    let (stock, first) = (20, 5);
    let mut s = setup(&redis, stock, first, || redis.snapshot()).await;
    let _ = s.worker.kill();
    let _ = s.worker.wait();
    let (conn, ch) = s.ns.broker().open().await.unwrap();
    ch.queue_purge(s.ns.keys().orders_queue().into(), Default::default())
        .await
        .unwrap();
    let _ = conn.close(200, "purged".into()).await;
    redis.crash_and_restart();
    closed_while_frozen(&s, Duration::from_secs(3), first).await;
    let (_, state) = s.app.get("/api/v1/admin/redis", Some(&s.app.admin())).await;
    let epoch = state["epoch"].as_i64().unwrap();
    let admin = s.app.admin();
    let (status, body) = s
        .app
        .post(
            "/api/v1/admin/redis/abandon",
            Some(&admin),
            serde_json::json!({"epoch": epoch + 1}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "no_such_repair", "{body}");
    let (status, body) = s
        .app
        .post(
            "/api/v1/admin/redis/abandon",
            Some(&admin),
            serde_json::json!({"epoch": "x"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = s
        .app
        .post(
            "/api/v1/admin/redis/abandon",
            Some(&admin),
            serde_json::json!({"epoch": epoch}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _) = selling_again(&s.app, s.v, 10_000).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (_, state) = s.app.get("/api/v1/admin/redis", Some(&admin)).await;
    assert_eq!(state["repairing"], false, "{state}");
}
