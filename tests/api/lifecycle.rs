//! An order once it is persisted: pay and cancel (one winner when they race, the
//! shopper's lock across instances), the payment timeout that cancels unpaid orders,
//! and stock that comes back exactly once, also across duplicated timeouts, a crash
//! after a cancellation's commit and a redelivered batch.
use crate::helpers::*;
use futures::future::join_all;
use lapin::options::BasicPublishOptions;
use lapin::BasicProperties;
use reqwest::StatusCode;
use seckill::order::lifecycle::Canceller;
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

/// The payment timeout refuses an order that was paid: its message is consumed and
/// the order stays paid, its unit sold. A sentinel shows that the message was
/// consumed: an order persisted after the paid one and left unpaid. Its timeout is
/// scheduled after the paid order's with the same window, so it expires after it
/// (the delay queue expires messages at its head, in order), and the one timeout
/// consumer handles messages one after the other: once the sentinel is cancelled,
/// the paid order's message has been handled.
#[tokio::test]
async fn a_paid_order_stays_paid_after_its_window() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns)
        .env("SECKILL_PAYMENT_WINDOW_SECS", "1")
        .spawn()
        .await;
    let v = app.flash_sale(5).await;
    let id = created_order(&app, v, 10).await;
    let (status, paid) = act(&app, &id, 10, "pay").await;
    assert_eq!(status, StatusCode::OK, "{paid}");
    assert_eq!(paid["status"], "paid");
    assert!(paid["paid_at"].is_string());
    let sentinel = created_order(&app, v, 11).await;
    eventually(Duration::from_secs(15), || async {
        let (_, o) = app
            .get(&format!("/api/v1/orders/{sentinel}"), Some(&app.shopper(11)))
            .await;
        (o["status"] == "cancelled").then_some(())
    })
    .await
    .expect("the sentinel cancelled by its timeout");
    let (_, o) = app.get(&format!("/api/v1/orders/{id}"), Some(&app.shopper(10))).await;
    assert_eq!(o["status"], "paid", "the timeout refused the paid order");
    assert_eq!(
        stocks(&app, v).await,
        (4, 4),
        "the paid unit stays sold, the sentinel's came back"
    );
    let (status, body) = act(&app, &id, 10, "pay").await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "order_not_payable"));
    let (status, body) = act(&app, &id, 10, "cancel").await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "order_not_cancellable"));
    app.shutdown().await;
}

#[tokio::test]
async fn an_unpaid_order_is_cancelled_at_the_end_of_its_window_and_its_stock_goes_back() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns)
        .env("SECKILL_PAYMENT_WINDOW_SECS", "1")
        .spawn()
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
    let sentinel = created_order(&app, v, 3).await;
    assert_eq!(stocks(&app, v).await, (2, 2));

    // `first`'s timeout twice, then the sentinel's: the one timeout consumer handles
    // them in that order, so once the sentinel is cancelled both duplicates have been.
    let (conn, ch) = ns.broker().open().await.unwrap();
    for order in [&first, &first, &sentinel] {
        let body = serde_json::to_vec(&json!({"order_ids": [order.parse::<i64>().unwrap()]})).unwrap();
        ch.basic_publish(
            "".into(),
            ns.keys().timeout_queue().into(),
            BasicPublishOptions::default(),
            &body,
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    }
    conn.close(200, "done".into()).await.unwrap();
    eventually(Duration::from_secs(10), || async {
        let (_, o) = app
            .get(&format!("/api/v1/orders/{sentinel}"), Some(&app.shopper(3)))
            .await;
        (o["status"] == "cancelled").then_some(())
    })
    .await
    .expect("the sentinel cancelled by its timeout message");
    let (_, o) = app.get(&format!("/api/v1/orders/{first}"), Some(&app.shopper(1))).await;
    assert_eq!(o["status"], "cancelled");
    assert_eq!(
        stocks(&app, v).await,
        (4, 4),
        "one unit back for `first`'s two deliveries, one for the sentinel's"
    );

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
    let app = TestApp::builder(&ns).relay(false).spawn().await;
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
    let app = TestApp::builder(&ns)
        .env("SECKILL_USER_LOCK_WAIT_MS", "200")
        .spawn()
        .await;
    let other = TestApp::builder(&ns).api_only().spawn().await;
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

/// Runs `cancel` while a worker's transaction re-persists `order` (a redelivered
/// batch), interleaved deterministically on two connections: the worker's
/// transaction locks the voucher row exactly as `worker::persist` does, `cancel`
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

/// Lock order. The worker locks voucher rows first and then writes order rows (a
/// redelivered batch re-inserts its orders). A cancellation that changed the order
/// row first and then waited for the voucher row would close a cycle with it:
/// Postgres would abort one side with "deadlock detected" and the owner get a 500.
/// Every path that touches both locks the voucher row first: the owner's cancel
/// and the unpaid-order sweep (the payment timeout runs the same cancellation).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_sweep_racing_a_redelivered_batch_lock_the_voucher_first_and_never_deadlock() {
    let ns = Namespace::new().await;
    let app = Arc::new(TestApp::spawn(&ns).await);
    let v = app.flash_sale(5).await;

    // The unpaid-order sweep (it cancels as the payment timeout does).
    let by_sweep = created_order(&app, v, 41).await;
    let lifecycle = app.app().state().lifecycle.clone();
    let sweep = async move {
        lifecycle
            .sweep_unpaid(Duration::ZERO)
            .await
            .map_err(|e| format!("{e:#}"))
    };
    let (worker, swept) = race_with_redelivered_batch(&ns, &app, v, &by_sweep, 41, sweep).await;
    assert_eq!(swept, Ok(1), "the unpaid-order sweep racing the worker");
    assert_eq!(worker, Ok(0), "the redelivered order is already stored");
    let (_, o) = app
        .get(&format!("/api/v1/orders/{by_sweep}"), Some(&app.shopper(41)))
        .await;
    assert_eq!(o["status"], "cancelled");

    // The owner's cancel, through the API.
    let by_owner = created_order(&app, v, 40).await;
    let cancel = {
        let (app, id) = (app.clone(), by_owner.clone());
        async move { act(&app, &id, 40, "cancel").await }
    };
    let (worker, (status, body)) = race_with_redelivered_batch(&ns, &app, v, &by_owner, 40, cancel).await;
    assert_eq!(status, StatusCode::OK, "the owner's cancel racing the worker: {body}");
    assert_eq!(body["status"], "cancelled");
    assert_eq!(worker, Ok(0), "the redelivered order is already stored");
    assert_eq!(stocks(&app, v).await, (5, 5), "both units back, once each");
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

/// One shopper's storm of pays (and another's of cancels), 200 concurrent requests
/// of one order each, while other shoppers order and pay: the storms' extra requests
/// get 429 with `Retry-After` at once (the per-shopper limit is checked before the
/// wait for the shopper's lock), and every other shopper's order is accepted and
/// their pay succeeds. No answer is a 5xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shoppers_pay_storm_is_limited_and_others_are_served() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns)
        .env("SECKILL_RATE_LIMIT_PAY_CANCEL_PER_USER", "5")
        .spawn()
        .await;
    let v = app.flash_sale(50).await;
    let (payer, canceller) = (created_order(&app, v, 7).await, created_order(&app, v, 8).await);
    let others = 100..120i64;
    let crowd = async {
        join_all(others.clone().map(|user| {
            let app = &app;
            async move {
                let (status, body) = app.order(v, user).await;
                assert_eq!(status, StatusCode::ACCEPTED, "shopper {user}'s order: {body}");
                let id = body["order_id"].as_str().unwrap().to_owned();
                eventually(Duration::from_secs(20), || async {
                    let (_, o) = app.get(&format!("/api/v1/orders/{id}"), Some(&app.shopper(user))).await;
                    (o["status"] == "created").then_some(())
                })
                .await
                .expect("order persisted");
                act(app, &id, user, "pay").await
            }
        }))
        .await
    };
    let ((pays, pay_took), (cancels, cancel_took), crowd) = tokio::join!(
        storm(&app, &payer, 7, "pay", 200),
        storm(&app, &canceller, 8, "cancel", 200),
        crowd
    );
    check_storm(&pays, pay_took, "order_not_payable");
    check_storm(&cancels, cancel_took, "order_not_cancellable");
    for (user, (status, body)) in others.zip(crowd) {
        assert_eq!(status, StatusCode::OK, "shopper {user}'s pay: {body}");
        assert_eq!(body["status"], "paid");
    }
    app.shutdown().await;
}
