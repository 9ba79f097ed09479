//! Redis going back in time, or restarting with everything, judged shard by shard:
//! a rollback is caught at the first order that touches the shard, in
//! the script that would have sold from it; a restart that lost nothing closes
//! nothing; a repair waits for no transaction; each sale's closed time is a figure.
//! On Redis servers of the test's own.
use crate::faults::crowd::{assert_persisted, Steady};
use crate::fixtures::OwnRedis;
use crate::helpers::*;
use reqwest::StatusCode;
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// The sale's row of `GET /api/v1/admin/redis`.
async fn availability(app: &TestApp, v: i64) -> serde_json::Value {
    let (status, state) = app.get("/api/v1/admin/redis", Some(&app.admin())).await;
    assert_eq!(status, StatusCode::OK, "{state}");
    state["sales"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["voucher_id"].as_str() == Some(v.to_string().as_str()))
        .cloned()
        .unwrap_or_else(|| panic!("sale {v} in the admin view: {state}"))
}

/// The sale's `seckill_sale_closed_seconds` on `/metrics`, if exported.
async fn closed_gauge(app: &TestApp, v: i64) -> Option<f64> {
    let text = app.metrics_text();
    let prefix = format!("seckill_sale_closed_seconds{{voucher=\"{v}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|n| n.parse().unwrap())
}

/// `DEBUG RELOAD NOSAVE` (the same process, its state as at the last `SAVE`) a few
/// milliseconds after the save, with one order between: the process that saw that
/// order's reply holds a point of the shard's history the reload took away, so its
/// very next order
/// is refused (503), the shard closed in the same script, and the sale repaired.
/// The reloaded order (relayed or not by then) is never sold to anyone else: one
/// relayed is counted by the repair from its intent; one lost before any relay
/// read it is rescued from this process's log of the orders it acknowledged (an
/// incident, `rescued_order`, naming it). Shopper 1 keeps that one order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_milliseconds_after_a_save_is_caught_at_the_first_order() {
    let ns = Namespace::new().await;
    let redis = OwnRedis::snapshots_and_debug();
    let app = TestApp::builder(&ns)
        .env("REDIS_URL", redis.url())
        .env("SECKILL_REDIS_CLUSTER", "false")
        .forces_incidents(&["rescued_order"])
        .spawn()
        .await;
    let stock = 10i64;
    let v = app.flash_sale(stock).await;
    redis.snapshot();
    let (status, body) = app.order(v, 1).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let first = body["order_id"].clone();
    redis.reload_last_snapshot();
    // The first order after the reload, at once: refused, not sold from the state
    // that forgot shopper 1.
    let (status, body) = app.order(v, 1).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        "the first order after the reload: {body}"
    );
    repaired_after(&app, v, 0).await;
    let (status, body) = selling_again(&app, v, 1).await;
    // Relayed before the reload (its intent counted by the repair) or rescued from
    // this process's log: already ordered, that very order.
    assert_eq!(
        (status, code(&body), &body["error"]["order_id"]),
        (StatusCode::CONFLICT, "already_ordered", &first),
        "shopper 1 after the repair: {body}"
    );
    let rest = accepted(&wave(&app, v, 2..=40).await).len() as i64;
    assert!(rest < stock);
    wait_stored(&app, v, stock, Duration::from_secs(30), "ms reload").await;
    assert_eq!(stored_orders(&app, v).await, Some(stock), "exactly the stock, once");
    assert_balanced(&app, v).await;
    assert_no_incidents_but("reload ms after a save", &[&app.addr], &["rescued_order"]).await;
}

/// `DEBUG RELOAD NOSAVE` seconds after the save, twenty orders between, all
/// relayed and persisted: the first order after the reload is refused, the repair
/// counts the twenty from Postgres, none of their units or shoppers is sold again,
/// and the sale sells exactly the rest. The time it was closed is in the admin
/// view and on `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_seconds_after_a_save_resells_nothing_relayed_or_persisted() {
    let ns = Namespace::new().await;
    let redis = OwnRedis::snapshots_and_debug();
    let app = TestApp::builder(&ns)
        .env("REDIS_URL", redis.url())
        .env("SECKILL_REDIS_CLUSTER", "false")
        .spawn()
        .await;
    let stock = 50i64;
    let v = app.flash_sale(stock).await;
    redis.snapshot();
    let saved = Instant::now();
    let first = accepted(&wave(&app, v, 1..=20).await);
    assert_eq!(first.len(), 20);
    wait_stored(&app, v, 20, Duration::from_secs(30), "before the reload").await;
    tokio::time::sleep(Duration::from_secs(2).saturating_sub(saved.elapsed())).await;
    redis.reload_last_snapshot();
    let (status, body) = app.order(v, 7).await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "the first order after the reload: {body}"
    );
    repaired_after(&app, v, 0).await;
    let again = wave(&app, v, 1..=20).await;
    let twice: Vec<i64> = accepted(&again).into_keys().collect();
    assert!(twice.is_empty(), "persisted shoppers sold again: {twice:?}");
    let rest = accepted(&wave(&app, v, 100..200).await);
    assert_eq!(rest.len() as i64, stock - 20, "exactly the rest");
    wait_stored(&app, v, stock, Duration::from_secs(30), "seconds reload").await;
    assert_balanced(&app, v).await;
    assert_no_incidents("reload seconds after a save", &[&app.addr]).await;
    let sale = availability(&app, v).await;
    println!("availability after the reload: {sale}");
    assert_eq!(
        (sale["closed"].clone(), sale["repairs"].clone()),
        (false.into(), 1.into()),
        "{sale}"
    );
    assert!(sale["closed_ms"].as_i64().unwrap() > 0, "{sale}");
    let gauge = eventually(Duration::from_secs(5), || async {
        closed_gauge(&app, v).await.filter(|s| *s > 0.0)
    })
    .await
    .expect("the running sale's closed time on /metrics");
    assert!(
        (gauge * 1000.0 - sale["closed_ms"].as_f64().unwrap()).abs() < 1500.0,
        "{gauge} s vs {sale}"
    );
}

/// Redis killed and restarted with all of its data (AOF, fsync always) under a
/// steady stream of shoppers: nothing was lost, so nothing is repaired, and of the
/// orders sent once Redis answers again, none gets 503 but the first on each
/// connection that met the dead server (before, every order got 503 for about a
/// second while the new server was repaired).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_all_data_under_a_steady_crowd_repairs_nothing() {
    let ns = Namespace::new().await;
    let mut redis = OwnRedis::aof_always();
    let app = TestApp::builder(&ns)
        .env("REDIS_URL", redis.url())
        .env("SECKILL_REDIS_CLUSTER", "false")
        .env("SECKILL_HTTP_WORKERS", "2")
        .spawn()
        .await;
    let stock = 5_000i64;
    let v = app.flash_sale(stock).await;
    let jwt = seckill::http::auth::JwtKeys::new(SECRET);
    let shoppers = Steady::start(&app.addr, &jwt, app.pg(), v, 1, 1, Duration::from_millis(5));
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Requests and acknowledged orders on their way to Postgres meet the kill.
    shoppers.lands().await;
    redis.crash_and_restart();
    let answering = Instant::now();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let answers = shoppers.stop().await;
    // The orders sent after Redis answered again: 202, but for the first on each
    // connection the application had to the dead server (an HTTP worker's, the
    // shared one: this instance has 2 HTTP workers on this machine).
    let after: Vec<u16> = answers
        .iter()
        .filter(|a| a.sent > answering)
        .map(|a| a.status)
        .collect();
    let refused: Vec<&u16> = after.iter().filter(|s| **s != 202).collect();
    println!(
        "restart with all data under a crowd: {} orders sent after Redis answered, refused {refused:?}",
        after.len()
    );
    assert!(after.len() > 50, "the crowd went on: {}", after.len());
    assert!(refused.len() <= 3, "after Redis answered again: {refused:?}");
    assert_eq!(repairs_of(&app, v).await, 0, "nothing to repair");
    let acknowledged: Vec<i64> = answers.iter().filter_map(|a| a.id).collect();
    // Every acknowledged order stored, those in flight at the kill too.
    assert_persisted("restart under a crowd", app.pg(), v, &acknowledged).await;
    assert_no_incidents("restart under a crowd", &[&app.addr]).await;
}

/// A transaction that holds what a worker frozen in the middle of a batch holds
/// (the sales' voucher rows, locked; a relay intent deleted, uncommitted) while
/// Redis goes back in time for one sale and not for another: the sale that went
/// back is repaired without waiting for the transaction, and the other sells
/// throughout (before, the repair took the epoch row every batch held shared, and
/// every sale answered 503 until the frozen transaction ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_batch_transaction_keeps_no_sale_closed() {
    let ns = Namespace::new().await;
    let mut redis = OwnRedis::snapshots_only();
    let app = TestApp::builder(&ns)
        .env("REDIS_URL", redis.url())
        .env("SECKILL_REDIS_CLUSTER", "false")
        .spawn()
        .await;
    let (gone, other) = (app.flash_sale(30).await, app.flash_sale(30).await);
    for v in [gone, other] {
        assert_eq!(app.order(v, 1).await.0, StatusCode::ACCEPTED);
    }
    wait_stored(&app, gone, 1, Duration::from_secs(30), "setup").await;
    wait_stored(&app, other, 1, Duration::from_secs(30), "setup").await;
    redis.snapshot();
    // Orders of `gone` after the snapshot, persisted: the restore forgets them.
    let after: HashSet<i64> = accepted(&wave(&app, gone, 2..=6).await).into_values().collect();
    assert_eq!(after.len(), 5);
    wait_stored(&app, gone, 6, Duration::from_secs(30), "after the snapshot").await;
    // The frozen batch: both vouchers' rows locked, open.
    let mut frozen = app.pg().begin().await.unwrap();
    sqlx::query("SELECT stock FROM seckill_vouchers WHERE voucher_id = ANY($1) ORDER BY voucher_id FOR UPDATE")
        .bind(vec![gone, other])
        .execute(&mut *frozen)
        .await
        .unwrap();
    redis.crash_and_restart();
    let since = Instant::now();
    // `other` lost nothing: after the restart it sells (its first answers may be
    // 503 while the connection is made anew).
    let (status, body) = selling_again(&app, other, 500).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    for u in 501..520 {
        let (status, body) = app.order(other, u).await;
        assert_eq!(
            status,
            StatusCode::ACCEPTED,
            "the other sale, during the frozen batch: {body}"
        );
    }
    // `gone` went back: refused at its first order, repaired while the batch is frozen.
    let (status, body) = app.order(gone, 3).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    repaired_after(&app, gone, 0).await;
    println!(
        "repaired with the batch frozen, {} ms after the restart",
        since.elapsed().as_millis()
    );
    for u in 2..=6 {
        let (status, body) = app.order(gone, u).await;
        assert_eq!(body["error"]["code"], "already_ordered", "shopper {u}: {status} {body}");
    }
    assert_eq!(app.order(gone, 99).await.0, StatusCode::ACCEPTED);
    frozen.rollback().await.unwrap();
    assert_eq!(repairs_of(&app, other).await, 0, "the other sale was not repaired");
    wait_stored(&app, gone, 7, Duration::from_secs(30), "after the batch").await;
    wait_stored(&app, other, 21, Duration::from_secs(30), "after the batch").await;
    assert_balanced(&app, gone).await;
    assert_balanced(&app, other).await;
}
