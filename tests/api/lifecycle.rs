//! Issue 6: pay, cancel, and unpaid orders that give their stock back.
use crate::helpers::*;
use futures::future::join_all;
use lapin::options::BasicPublishOptions;
use lapin::BasicProperties;
use reqwest::StatusCode;
use seckill::app::{Mode, Options};
use seckill::broker::Broker;
use seckill::order::lifecycle::Canceller;
use serde_json::{json, Value};
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

#[tokio::test]
async fn a_paid_order_stays_paid_after_its_window() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn_with(
        &ns,
        &[("SECKILL_PAYMENT_WINDOW_SECS", "1")],
        Options::default(),
        Mode::All,
    )
    .await;
    let v = app.flash_sale(5).await;
    let id = created_order(&app, v, 10).await;
    let (status, paid) = act(&app, &id, 10, "pay").await;
    assert_eq!(status, StatusCode::OK, "{paid}");
    assert_eq!(paid["status"], "paid");
    assert!(paid["paid_at"].is_string());
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (_, o) = app.get(&format!("/api/v1/orders/{id}"), Some(&app.shopper(10))).await;
    assert_eq!(o["status"], "paid");
    assert_eq!(stocks(&app, v).await, (4, 4), "stock unchanged");
    let (status, body) = act(&app, &id, 10, "pay").await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "order_not_payable"));
    let (status, body) = act(&app, &id, 10, "cancel").await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "order_not_cancellable"));
    app.shutdown().await;
}

#[tokio::test]
async fn an_unpaid_order_is_cancelled_at_the_end_of_its_window_and_its_stock_goes_back() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn_with(
        &ns,
        &[("SECKILL_PAYMENT_WINDOW_SECS", "1")],
        Options::default(),
        Mode::All,
    )
    .await;
    let v = app.flash_sale(1).await;
    let id = created_order(&app, v, 20).await;
    assert_eq!(code(&app.order(v, 21).await.1), "sold_out");
    let cancelled = eventually(Duration::from_secs(15), || async {
        let (_, o) = app.get(&format!("/api/v1/orders/{id}"), Some(&app.shopper(20))).await;
        (o["status"] == "cancelled").then_some(o)
    })
    .await
    .expect("cancelled by the timeout");
    assert!(cancelled["cancelled_at"].is_string());
    assert_eq!(stocks(&app, v).await, (1, 1), "the unit is back in Postgres and Redis");
    // The same shopper can order again and gets a new order (the sold-out flag
    // was cleared by the return).
    let (status, again) = app.order(v, 20).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{again}");
    assert_ne!(again["order_id"].as_str().unwrap(), id);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pay_and_cancel_racing_on_one_order_have_exactly_one_winner() {
    let ns = Namespace::new().await;
    let app = Arc::new(TestApp::spawn(&ns).await);
    let v = app.flash_sale(20).await;
    let mut ids = Vec::new();
    for user in 100..110 {
        ids.push((user, created_order(&app, v, user).await));
    }
    let races = ids.iter().map(|(user, id)| {
        let (app, id, user) = (app.clone(), id.clone(), *user);
        tokio::spawn(async move {
            let (pay, cancel) = tokio::join!(act(&app, &id, user, "pay"), act(&app, &id, user, "cancel"));
            (pay.0, cancel.0)
        })
    });
    let mut cancelled = 0;
    for r in join_all(races).await {
        let (pay, cancel) = r.unwrap();
        let winners = [pay, cancel].iter().filter(|s| **s == StatusCode::OK).count();
        let losers = [pay, cancel].iter().filter(|s| **s == StatusCode::CONFLICT).count();
        assert_eq!((winners, losers), (1, 1), "pay {pay}, cancel {cancel}");
        cancelled += usize::from(cancel == StatusCode::OK);
    }
    assert_eq!(stocks(&app, v).await, (10 + cancelled as i64, 10 + cancelled as i64));
}

/// The timeout message arrives twice; the Redis update after a cancellation's
/// commit is lost to a crash: in both cases the unit comes back exactly once.
#[tokio::test]
async fn duplicated_timeouts_and_a_crash_after_commit_return_the_stock_exactly_once() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await; // 15-minute window: no timeout of its own here
    let v = app.flash_sale(5).await;
    let first = created_order(&app, v, 1).await;
    let second = created_order(&app, v, 2).await;
    assert_eq!(stocks(&app, v).await, (3, 3));

    let broker = Broker::new(
        "amqp://guest:guest@127.0.0.1:5672/%2f",
        ns.keys(),
        Duration::from_secs(5),
        5,
    );
    let (conn, ch) = broker.open().await.unwrap();
    let body = serde_json::to_vec(&json!({"order_ids": [first.parse::<i64>().unwrap()]})).unwrap();
    for _ in 0..2 {
        ch.basic_publish(
            "",
            &ns.keys().timeout_queue(),
            BasicPublishOptions::default(),
            &body,
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    }
    conn.close(200, "done").await.unwrap();
    eventually(Duration::from_secs(10), || async {
        let (_, o) = app.get(&format!("/api/v1/orders/{first}"), Some(&app.shopper(1))).await;
        (o["status"] == "cancelled").then_some(())
    })
    .await
    .expect("cancelled by the timeout message");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(stocks(&app, v).await, (4, 4), "one unit back for two deliveries");

    // A crash right after the Postgres commit: only the Postgres half ran.
    let lifecycle = &app.app().state().lifecycle;
    let (_, ret) = lifecycle
        .cancel_in_pg(second.parse().unwrap(), Canceller::Owner(2))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stocks(&app, v).await, (5, 4), "Postgres has it back, Redis not yet");
    assert_eq!(lifecycle.recover_returns(Duration::ZERO).await.unwrap(), 1);
    assert_eq!(
        lifecycle.recover_returns(Duration::ZERO).await.unwrap(),
        0,
        "nothing left to recover"
    );
    assert!(
        lifecycle.return_stock(ret).await.unwrap(),
        "a repeated return is a no-op"
    );
    assert_eq!(stocks(&app, v).await, (5, 5), "exactly once");
    app.shutdown().await;
}

#[tokio::test]
async fn someone_elses_order_is_404_and_a_pending_one_409() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(5).await;
    let id = created_order(&app, v, 1).await;
    for verb in ["pay", "cancel"] {
        let (status, body) = act(&app, &id, 2, verb).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::NOT_FOUND, "order_not_found"),
            "{verb}"
        );
        let (status, body) = act(&app, "4242", 1, verb).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::NOT_FOUND, "order_not_found"),
            "{verb}"
        );
    }
    let (status, body) = act(&app, &id, 1, "cancel").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "cancelled");
    app.shutdown().await;

    // Without a relay an order stays pending: it can be neither paid nor cancelled yet.
    let app = TestApp::spawn_with(
        &ns,
        &[],
        Options {
            relay: false,
            ..Default::default()
        },
        Mode::All,
    )
    .await;
    let (_, body) = app.order(v, 3).await;
    let pending = body["order_id"].as_str().unwrap().to_owned();
    let (status, body) = act(&app, &pending, 3, "pay").await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "order_not_payable"));
    let (status, body) = act(&app, &pending, 3, "cancel").await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "order_not_cancellable"));
    app.shutdown().await;
}

/// Pay and cancel run under the shopper's lock: while another request of the same
/// shopper holds it (on another instance) past the wait, the answer is 409.
#[tokio::test]
async fn a_shoppers_request_waiting_too_long_for_their_previous_one_gets_409() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn_with(
        &ns,
        &[("SECKILL_USER_LOCK_WAIT_MS", "200")],
        Options::default(),
        Mode::All,
    )
    .await;
    let other = TestApp::spawn_api_only(&ns, &[]).await;
    let v = app.flash_sale(5).await;
    let id = created_order(&app, v, 7).await;
    let held = other.app().state().locks.owner().lock("user:7").await.unwrap();
    let (status, body) = act(&app, &id, 7, "pay").await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "request_in_progress"));
    held.release().await.unwrap().unwrap();
    let (status, body) = act(&app, &id, 7, "pay").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    app.shutdown().await;
    other.shutdown().await;
}
