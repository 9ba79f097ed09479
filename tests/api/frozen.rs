//! A worker frozen, or gone, holding orders while Redis restarts or goes back in
//! time (once the repair waited on a frozen worker and the shop was shut for
//! as long as the freeze). Orders a relay published and no worker has stored yet
//! are in RabbitMQ or in a worker's hands; the relays' intents in Postgres name
//! each of them (its shopper, its time), so a repair counts them without waiting
//! for the worker, and a restart that lost nothing repairs nothing. Each test: a
//! `seckill worker` process of its own, a Redis server of its own, the first
//! shoppers' orders published to the worker and held there. Each asserts: the
//! sale sells again while the worker is still frozen (and, after a restart with
//! all data, answers nothing but 202 and 409 once Redis answers), no shopper gets
//! a second 202, nothing is stored `failed`, every acknowledged order is stored
//! once, Postgres stock = 0 once sold out, the audit balanced.
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

/// While the frozen worker holds the first orders: the sale sells again within
/// `within` (a repair, when one is needed, waits for nobody), the first shoppers
/// are told they already ordered, and a new shopper buys. Returns how long the
/// sale answered 503 from `since`, and the new shopper's order id.
async fn sells_while_frozen(s: &Setup, since: Instant, within: Duration, first: i64) -> (Duration, i64) {
    let (status, body) = eventually(within, || async {
        let (status, body) = s.app.order(s.v, 1).await;
        (status != StatusCode::SERVICE_UNAVAILABLE).then_some((status, body))
    })
    .await
    .unwrap_or_else(|| panic!("the sale sells again within {within:?} while the worker is frozen"));
    let closed = since.elapsed();
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "already_ordered"),
        "a first shopper, while the worker holds their order: {body}"
    );
    let again = wave(&s.app, s.v, 1..=first).await;
    let twice: Vec<i64> = accepted(&again).into_keys().collect();
    assert!(
        twice.is_empty(),
        "shoppers sold twice while the worker was frozen: {twice:?}"
    );
    let (status, body) = s.app.order(s.v, 50_000).await;
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "a new shopper while the worker is frozen: {body}"
    );
    let id: i64 = body["order_id"].as_str().unwrap().parse().unwrap();
    let in_pg: i64 = sqlx::query_scalar("SELECT count(*) FROM voucher_orders WHERE voucher_id = $1")
        .bind(s.v)
        .fetch_one(s.app.pg())
        .await
        .unwrap();
    assert_eq!(in_pg, 0, "the worker was still frozen: nothing stored yet");
    (closed, id)
}

/// After the worker is back: the sale sells again; the first shoppers are told they
/// already ordered; a crowd takes exactly the rest; every acknowledged order is
/// stored once. `between`: the orders acknowledged since the first shoppers'.
pub(crate) async fn sells_the_rest_exactly(
    s: &Setup,
    stock: i64,
    between: &HashSet<i64>,
    closed_since: Instant,
    scenario: &str,
) {
    selling_again(&s.app, s.v, 1).await;
    println!(
        "{scenario}: selling again {} ms after the event",
        closed_since.elapsed().as_millis()
    );
    let first = s.first.len() as i64;
    let again = wave(&s.app, s.v, 1..=first).await;
    let twice: Vec<i64> = accepted(&again).into_keys().collect();
    assert!(twice.is_empty(), "{scenario}: shoppers sold twice: {twice:?}");
    let rest = accepted(&wave(&s.app, s.v, 1000..1000 + 2 * stock).await);
    assert_eq!(
        rest.len() as i64,
        stock - first - between.len() as i64,
        "{scenario}: exactly the stock that was left"
    );
    let all: HashSet<i64> = s.first.iter().chain(rest.values()).chain(between).copied().collect();
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
    // (A number issued twice is renumbered and logged as an INCIDENT by the worker,
    // read when the namespace ends: the UNIQUE column cannot show it.)
    assert!(
        rows.iter().all(|r| r.2.is_some()),
        "{scenario}: every stored order has its business number"
    );
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
/// holding the first orders: nothing was lost, so nothing is repaired, and once
/// Redis answers again every order gets an answer of its own (202 or 409), never
/// 503, while the worker is still frozen.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restart_with_all_data_while_a_worker_is_frozen_closes_nothing() {
    let mut redis = OwnRedis::aof_always();
    let (stock, first) = (60, 20);
    let s = setup(&redis, stock, first, || {}).await;
    redis.crash_and_restart();
    let since = Instant::now();
    // Redis answers (crash_and_restart returns once it does): from the first answer
    // on, no 503.
    let (closed, id) = sells_while_frozen(&s, since, Duration::from_secs(5), first).await;
    let mut between = HashSet::from([id]);
    let mut probe = 0;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let (status, body) = s.app.order(s.v, 60_000 + probe).await;
        assert!(
            [StatusCode::ACCEPTED, StatusCode::CONFLICT].contains(&status),
            "after a restart that lost nothing: {status} {body}"
        );
        if status == StatusCode::ACCEPTED {
            between.insert(body["order_id"].as_str().unwrap().parse().unwrap());
        }
        probe += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(repairs_of(&s.app, s.v).await, 0, "nothing to repair");
    println!("restart with all data, worker frozen: closed {} ms", closed.as_millis());
    signal(&s.worker, "CONT");
    sells_the_rest_exactly(&s, stock, &between, since, "restart with all data").await;
}

/// Redis restarts from a snapshot taken before the first orders while the worker is
/// frozen holding them: Redis has forgotten them and only the worker has them. The
/// first order finds the shard behind what this process saw, the repair counts the
/// first orders from the relays' intents, and the sale sells again while the worker
/// is still frozen; its orders are stored when it thaws.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rollback_while_a_worker_is_frozen_is_repaired_without_waiting_for_it() {
    let mut redis = OwnRedis::snapshots_only();
    let (stock, first) = (60, 20);
    let s = setup(&redis, stock, first, || redis.snapshot()).await;
    redis.crash_and_restart();
    let since = Instant::now();
    let (closed, id) = sells_while_frozen(&s, since, Duration::from_secs(10), first).await;
    assert_eq!(repairs_of(&s.app, s.v).await, 1, "one repair");
    println!("rollback, worker frozen: closed {} ms", closed.as_millis());
    signal(&s.worker, "CONT");
    sells_the_rest_exactly(&s, stock, &HashSet::from([id]), since, "rollback").await;
}

/// No worker alive at all (killed) while Redis restarts from an older snapshot: the
/// published orders sit in the queue. The repair counts them from the intents and
/// the sale sells on; a worker started later stores them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_repair_with_no_worker_alive_waits_for_nobody() {
    let mut redis = OwnRedis::snapshots_only();
    let (stock, first) = (40, 10);
    let mut s = setup(&redis, stock, first, || redis.snapshot()).await;
    let _ = s.worker.kill();
    let _ = s.worker.wait();
    redis.crash_and_restart();
    let since = Instant::now();
    let (_, id) = sells_while_frozen(&s, since, Duration::from_secs(10), first).await;
    let env = [("REDIS_URL", redis.url()), ("SECKILL_REDIS_CLUSTER", "false".into())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    s.worker = spawn_worker_binary(&s.ns, &env).await;
    sells_the_rest_exactly(&s, stock, &HashSet::from([id]), since, "no worker alive").await;
}
