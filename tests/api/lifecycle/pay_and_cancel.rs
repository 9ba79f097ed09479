//! lifecycle: `a_paid_order_stays_paid_after_its_window`,
//! `an_unpaid_order_is_cancelled_at_the_end_of_its_window_and_its_stock_goes_back`,
//! `pay_and_cancel_racing_on_one_order_have_exactly_one_winner`,
//! `duplicated_timeouts_and_a_crash_after_commit_return_the_stock_exactly_once`,
//! `someone_elses_order_is_404_and_a_pending_one_409`,
//! `a_shoppers_request_waiting_too_long_for_their_previous_one_gets_409`,
//! `cancel_and_sweep_racing_a_redelivered_batch_lock_the_voucher_first_and_never_deadlock`.
use super::*;

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
    // And Postgres stores it live, not failed: the cancelled order no longer
    // holds the shopper's place in the one-live-order index. (Its own payment
    // window may have closed by the time it is read: cancelled, then.)
    let again = again["order_id"].as_str().unwrap().to_owned();
    let stored = eventually(Duration::from_secs(15), || async {
        let (_, o) = app
            .get(&format!("/api/v1/orders/{again}"), Some(&app.shopper(20)))
            .await;
        (o["status"] != "pending").then_some(o)
    })
    .await
    .expect("the second order persisted");
    assert!(
        stored["status"] == "created" || stored["status"] == "cancelled",
        "{stored}"
    );
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
    let lifecycle = &app.app().state().ordering.lifecycle;
    let (_, ret) = lifecycle
        .cancel_in_pg(
            seckill::id::OrderId::new(second.parse().unwrap()),
            Canceller::Owner(seckill::id::UserId::new(2)),
        )
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
    let held = other.app().state().handles.locks.owner().lock("user:7").await.unwrap();
    let (status, body) = act(&app, &id, 7, "pay").await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "request_in_progress"));
    held.release().await.unwrap().unwrap();
    let (status, body) = act(&app, &id, 7, "pay").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    app.shutdown().await;
    other.shutdown().await;
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
    let lifecycle = app.app().state().ordering.lifecycle.clone();
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
