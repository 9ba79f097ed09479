//! rollback: histories named, not counted. After Redis goes back in time, the next
//! write of anyone takes the very sequence the lost write had; a shard's history
//! names each write, so whoever saw the lost one tells the two histories apart
//! (`src/recovery/history.rs`). On a Redis of the test's own, `DEBUG RELOAD
//! NOSAVE` back to a `SAVE` (the same process, connections kept), two `serve`
//! processes A and B and a worker.
use super::*;
use crate::fixtures::CutLink;
use seckill::app::Mode;

/// A serve process (API and relay; `relay` false: the API alone) on `redis`.
pub(crate) async fn serve(ns: &Namespace, redis: &OwnRedis, relay: bool, extra: &[(&str, String)]) -> TestApp {
    let mut b = TestApp::builder(ns)
        .env("REDIS_URL", redis.url())
        .mode(Mode::Serve)
        .relay(relay)
        .worker(false)
        .forces_incidents(&["rescued_order"]);
    for (k, v) in extra {
        b = b.env(k, v.clone());
    }
    b.spawn().await
}

/// The worker alone on `redis`.
pub(crate) async fn worker(ns: &Namespace, redis: &OwnRedis) -> TestApp {
    TestApp::builder(ns)
        .env("REDIS_URL", redis.url())
        .mode(Mode::Worker)
        .spawn()
        .await
}

/// The order id of an accepted order's answer.
pub(super) fn order_id(body: &serde_json::Value) -> i64 {
    body["order_id"].as_str().expect("an order id").parse().unwrap()
}

/// Waits until a relay recorded its intent for order `id` (it read its entry).
async fn relayed(app: &TestApp, id: i64) {
    let pg = app.pg().clone();
    eventually(Duration::from_secs(30), || {
        let pg = pg.clone();
        async move {
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM relay_intents WHERE $1 = ANY(order_ids)")
                .bind(id)
                .fetch_one(&pg)
                .await
                .ok()?;
            let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM voucher_orders WHERE id = $1")
                .bind(id)
                .fetch_one(&pg)
                .await
                .ok()?;
            (n + stored > 0).then_some(())
        }
    })
    .await
    .expect("a relay read the order within 30 s");
}

/// Shopper `user` orders through `app` until the answer is not a 503 (the sale
/// repaired); that answer. Any 202 among them is a second order.
async fn again_after_repair(app: &TestApp, v: i64, user: i64) -> (StatusCode, serde_json::Value) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = app.order(v, user).await;
        assert_ne!(
            status,
            StatusCode::ACCEPTED,
            "shopper {user} sold a second time: {body}"
        );
        if status != StatusCode::SERVICE_UNAVAILABLE || std::time::Instant::now() > deadline {
            return (status, body);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What every case ends with: shopper X holds exactly order `x`, stored
/// `created`; every order of `others` is stored; nothing is `failed`.
pub(super) async fn settled(app: &TestApp, v: i64, x: i64, others: &[i64]) {
    let (status, body) = again_after_repair(app, v, 1).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "already_ordered"),
        "{body}"
    );
    assert_eq!(
        body["error"]["order_id"].as_str(),
        Some(x.to_string().as_str()),
        "X keeps its one order: {body}"
    );
    let mut all: HashSet<i64> = others.iter().copied().collect();
    all.insert(x);
    persisted(app, &all).await;
    let rows = stored(app, v).await;
    assert!(rows.iter().all(|r| r.2 == "created"), "nothing failed: {rows:?}");
    let of_x: Vec<_> = rows.iter().filter(|r| r.1 == 1).collect();
    assert_eq!(of_x.len(), 1, "one order of X: {of_x:?}");
    assert_eq!(of_x[0].0, x);
    let (status, order) = app.get(&format!("/api/v1/orders/{x}"), Some(&app.shopper(1))).await;
    assert_eq!(
        (status, order["status"].as_str()),
        (StatusCode::OK, Some("created")),
        "{order}"
    );
}

/// Item 1 of the rollback's tries: A's shopper X orders (202) and a relay reads
/// it; Redis goes back to before it; B's shopper Y orders (B never saw X's write:
/// its write takes the sequence X's had); X orders again through A. A's point of
/// X's write names it, the shard's write at that place is Y's: A refuses (503),
/// never a second 202, and the sale is repaired with both orders.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rollback_hidden_by_another_processs_write_is_caught() {
    let ns = Namespace::new().await;
    let redis = OwnRedis::snapshots_and_debug();
    let a = serve(&ns, &redis, true, &[]).await;
    let b = serve(&ns, &redis, true, &[]).await;
    let w = worker(&ns, &redis).await;
    let v = a.flash_sale(100).await;
    again_until_accepted(&b, v, 3).await;
    caught_with(&redis, &a, &b, v).await;
    drop(w);
}

/// The same with B cut off from Postgres (it learns nothing of what the relays
/// recorded, and relays nothing): A alone holds what tells the histories apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rollback_hidden_by_a_process_cut_off_from_postgres_is_caught() {
    let ns = Namespace::new().await;
    let redis = OwnRedis::snapshots_and_debug();
    let link = CutLink::to("127.0.0.1:5432").await;
    let url = ns.vars["DATABASE_URL"].replace(":5432/", &format!(":{}/", link.port()));
    let a = serve(&ns, &redis, true, &[]).await;
    let b = serve(&ns, &redis, false, &[("DATABASE_URL", url)]).await;
    let w = worker(&ns, &redis).await;
    let v = a.flash_sale(100).await;
    // B's first write, so that it holds a point of the history too (once it knows
    // of the sale: by its event, or its cache's reload).
    again_until_accepted(&b, v, 3).await;
    link.cut();
    caught_with(&redis, &a, &b, v).await;
    link.heal();
    drop(w);
}

/// The steps of both cases; X is shopper 1, Y shopper 2.
pub(crate) async fn caught_with(redis: &OwnRedis, a: &TestApp, b: &TestApp, v: i64) {
    redis.snapshot();
    let (status, body) = a.order(v, 1).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let x = order_id(&body);
    relayed(a, x).await;
    redis.reload_last_snapshot();
    let (status, body) = b.order(v, 2).await;
    assert!(
        [StatusCode::ACCEPTED, StatusCode::SERVICE_UNAVAILABLE].contains(&status),
        "Y through B: {status} {body}"
    );
    let y = (status == StatusCode::ACCEPTED).then(|| order_id(&body));
    let (status, body) = a.order(v, 1).await;
    assert_ne!(status, StatusCode::ACCEPTED, "X sold a second time: {body}");
    let y = match y {
        Some(y) => y,
        None => order_id(&again_until_accepted(b, v, 2).await),
    };
    settled(a, v, x, &[y]).await;
    assert!(repairs_of(a, v).await >= 1, "the loss caught and repaired");
}

/// Shopper `user` orders through `app` until a 202 (after a repair); its body.
pub(crate) async fn again_until_accepted(app: &TestApp, v: i64, user: i64) -> serde_json::Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = app.order(v, user).await;
        if status == StatusCode::ACCEPTED {
            return body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no 202 for {user} within 60 s: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Item 1's third case: Redis goes back before any relay read X's entry (no relay
/// runs until after), so that the order exists nowhere but in A's memory. A still
/// catches the loss at its next write (its point names X's), and hands X's order
/// to its recovery desk: recorded in an intent before the repair, written back by
/// it (an incident naming it), then stored. Never a second order, never a 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_order_no_relay_read_before_the_rollback_is_rescued_from_memory() {
    let ns = Namespace::new().await;
    let redis = OwnRedis::snapshots_and_debug();
    let a = serve(&ns, &redis, false, &[]).await;
    let b = serve(&ns, &redis, false, &[]).await;
    let w = worker(&ns, &redis).await;
    let v = a.flash_sale(100).await;
    again_until_accepted(&b, v, 3).await;
    redis.snapshot();
    let (status, body) = a.order(v, 1).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let x = order_id(&body);
    redis.reload_last_snapshot();
    let (status, body) = b.order(v, 2).await;
    assert_eq!(status, StatusCode::ACCEPTED, "Y through B: {body}");
    let y = order_id(&body);
    let (status, body) = a.order(v, 1).await;
    assert_ne!(status, StatusCode::ACCEPTED, "X sold a second time: {body}");
    // X's order, asked for by its owner meanwhile: never "not found".
    let (status, order) = a.get(&format!("/api/v1/orders/{x}"), Some(&a.shopper(1))).await;
    assert_ne!(status, StatusCode::NOT_FOUND, "{order}");
    let relay = serve(&ns, &redis, true, &[]).await;
    settled(&a, v, x, &[y]).await;
    let rescued = a.metric("seckill_worker_incidents_total{kind=\"rescued_order\"}").await;
    assert_eq!(rescued, 1.0, "X's order named as an incident, once");
    drop((relay, w));
}

/// A process idle while another writes its shard 10,000 times, then writes: its
/// point is far behind, but the shard still holds it (every write of the
/// generation keeps its name): no closure, no repair.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_process_idle_while_others_write_ten_thousand_times_writes_on() {
    let ns = Namespace::new().await;
    let redis = OwnRedis::snapshots_and_debug();
    let a = serve(&ns, &redis, false, &[]).await;
    let b = serve(&ns, &redis, false, &[]).await;
    let v = a.flash_sale(20_000).await;
    assert_eq!(a.order(v, 1).await.0, StatusCode::ACCEPTED);
    // 10,000 writes through B, one order each (one at a time: no two in one call).
    for u in 0..10_000i64 {
        let (status, body) = b.order(v, 100 + u).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    let seq: i64 = redis
        .cli(&["GET", &ns.keys().seq_at(v, 0, 1)])
        .unwrap()
        .parse()
        .unwrap();
    assert!(seq >= 10_001, "the shard was written 10,001 times at least: {seq}");
    let (status, body) = a.order(v, 2).await;
    assert_eq!(status, StatusCode::ACCEPTED, "A after 10,000 writes of B: {body}");
    assert_eq!(repairs_of(&a, v).await, 0, "no repair");
    assert_eq!(a.app().state().metrics.redis_repairs.get(), 0);
    assert!(!a.app().state().recovery.is_closed(v), "not closed");
}

/// Item 2: one serve (no worker: acknowledged orders wait in RabbitMQ), a snapshot,
/// ten more orders, Redis killed and restarted from the snapshot. With no order
/// placed since, every owner lookup of the twenty (`GET /orders/{id}`, `…/orders/mine`)
/// is 200 (`pending` or `created`) or 503, never 404; once a worker runs, all twenty
/// are `created`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn owner_lookups_after_a_restart_from_an_older_snapshot_are_never_404() {
    let ns = Namespace::new().await;
    let mut redis = OwnRedis::snapshots_only();
    let app = TestApp::builder(&ns)
        .env("REDIS_URL", redis.url())
        .worker(false)
        .spawn()
        .await;
    let v = app.flash_sale(100).await;
    let first = accepted(&wave(&app, v, 1..=10).await);
    for id in first.values() {
        relayed(&app, *id).await;
    }
    redis.snapshot();
    let second = accepted(&wave(&app, v, 11..=20).await);
    for id in second.values() {
        relayed(&app, *id).await;
    }
    redis.crash_and_restart();
    let orders: Vec<(i64, i64)> = first.iter().chain(second.iter()).map(|(u, id)| (*u, *id)).collect();
    let until = std::time::Instant::now() + Duration::from_secs(5);
    let mut answers: HashMap<u16, usize> = HashMap::new();
    while std::time::Instant::now() < until {
        for (user, id) in &orders {
            let token = app.shopper(*user);
            for path in [
                format!("/api/v1/orders/{id}"),
                format!("/api/v1/vouchers/{v}/orders/mine"),
            ] {
                let (status, body) = app.get(&path, Some(&token)).await;
                *answers.entry(status.as_u16()).or_default() += 1;
                match status {
                    StatusCode::OK => assert!(
                        ["pending", "created"].contains(&body["status"].as_str().unwrap_or("")),
                        "{path}: {body}"
                    ),
                    StatusCode::SERVICE_UNAVAILABLE => {}
                    other => panic!("{path} for shopper {user}: {other} {body}"),
                }
            }
        }
    }
    println!("owner lookups after the restart: {answers:?}");
    let w = worker(&ns, &redis).await;
    persisted(&app, &orders.iter().map(|(_, id)| *id).collect()).await;
    let rows = stored(&app, v).await;
    assert_eq!(rows.len(), 20, "{rows:?}");
    assert!(rows.iter().all(|r| r.2 == "created"), "{rows:?}");
    drop(w);
}
