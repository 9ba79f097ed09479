//! The worker's persist step fed directly (no broker, no admission in Redis): what
//! the database's guard stores as created, duplicate or failed, and how an order id
//! or business number that is already taken is stored and counted, never hidden.
use crate::helpers::*;
use seckill::ordering::model::OrderMsg;
use seckill::ordering::worker::persist::{persist, persist_relayed, Ctx};
use std::collections::HashSet;
use std::time::Duration;

/// What the instance's worker persists with (its background pool).
fn ctx(app: &TestApp) -> Ctx {
    let state = app.app().state();
    Ctx {
        pg: state.handles.background_pg.clone(),
        sequences: state.sequences.clone(),
        keys: state.handles.keys.clone(),
    }
}

/// An order admitted now, of `user` for `voucher`, under `id`.
fn order(id: i64, user: i64, voucher: i64) -> OrderMsg {
    OrderMsg {
        id: seckill::id::OrderId::new(id),
        user_id: seckill::id::UserId::new(user),
        voucher_id: seckill::id::VoucherId::new(voucher),
        created_ms: chrono::Utc::now().timestamp_millis(),
        epoch: 0,
    }
}

/// The database's own guard, fed directly: a batch redelivered after the sale sold
/// out is recognised as duplicates (not failures); orders beyond Postgres's stock and
/// a second order of one shopper become `failed`; stock is never negative.
#[tokio::test]
async fn the_database_guard_classifies_duplicates_overstock_and_second_orders() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let (v, w) = (app.flash_sale(3).await, app.flash_sale(5).await);
    let now = chrono::Utc::now().timestamp_millis();
    let epoch = 0i64;
    let msg = |id: i64, user: i64, voucher: i64| OrderMsg {
        id: seckill::id::OrderId::new(id),
        user_id: seckill::id::UserId::new(user),
        voucher_id: seckill::id::VoucherId::new(voucher),
        created_ms: now + id,
        epoch,
    };
    let ctx = ctx(&app);
    let run = |orders: Vec<OrderMsg>| {
        let ctx = ctx.clone();
        async move { persist(&ctx, &orders).await.unwrap() }
    };

    let first: Vec<OrderMsg> = (1..=3).map(|i| msg(i, 100 + i, v)).collect();
    let o = run(first.clone()).await;
    assert_eq!((o.created, o.duplicates, o.failed), (3, 0, 0));
    let o = run(first).await;
    assert_eq!(
        (o.created, o.duplicates, o.failed),
        (0, 3, 0),
        "a redelivery at sold-out is not an incident"
    );
    let o = run(vec![msg(4, 200, v)]).await;
    assert_eq!(
        (o.created, o.duplicates, o.failed),
        (0, 0, 1),
        "beyond Postgres's stock"
    );
    let o = run(vec![msg(10, 7, w), msg(11, 7, w), msg(12, 8, w)]).await;
    assert_eq!(
        (o.created, o.duplicates, o.failed),
        (2, 0, 1),
        "one live order per shopper"
    );
    let o = run(vec![msg(10, 7, w), msg(13, 7, w)]).await;
    assert_eq!((o.created, o.duplicates, o.failed), (0, 1, 1));

    let statuses: Vec<(i64, String, Option<String>)> =
        sqlx::query_as("SELECT id, status, order_no FROM voucher_orders ORDER BY id")
            .fetch_all(app.pg())
            .await
            .unwrap();
    let failed: Vec<i64> = statuses.iter().filter(|r| r.1 == "failed").map(|r| r.0).collect();
    assert_eq!(failed, vec![4, 11, 13]);
    assert!(
        statuses.iter().all(|r| (r.1 == "failed") == r.2.is_none()),
        "numbers only for created orders"
    );
    let stocks: Vec<i32> = sqlx::query_scalar("SELECT stock FROM seckill_vouchers ORDER BY voucher_id")
        .fetch_all(app.pg())
        .await
        .unwrap();
    assert_eq!(stocks, vec![0, 3]);
    app.shutdown().await;
}

/// The one index on a voucher's orders (migration 0019) keeps the rule of one
/// live order per shopper and voucher: a cancelled order frees its shopper, a
/// created or paid one does not, and orders that are not live (cancelled, failed)
/// never refuse each other. Batches of one shopper's orders persisted at once
/// store exactly one of them live.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_live_order_per_shopper_across_cancellations_and_parallel_batches() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let (v, w) = (app.flash_sale(100).await, app.flash_sale(100).await);
    let now = chrono::Utc::now().timestamp_millis();
    let epoch = 0i64;
    let msg = |id: i64, user: i64, voucher: i64| OrderMsg {
        id: seckill::id::OrderId::new(id),
        user_id: seckill::id::UserId::new(user),
        voucher_id: seckill::id::VoucherId::new(voucher),
        created_ms: now + id,
        epoch,
    };
    let ctx = ctx(&app);
    let counts = |o: seckill::ordering::worker::persist::Outcome| (o.created, o.duplicates, o.failed);
    let set_status = |id: i64, status: &'static str| {
        let pg = app.pg().clone();
        async move {
            sqlx::query("UPDATE voucher_orders SET status = $2 WHERE id = $1")
                .bind(id)
                .bind(status)
                .execute(&pg)
                .await
                .unwrap();
        }
    };

    assert_eq!(counts(persist(&ctx, &[msg(1, 7, v)]).await.unwrap()), (1, 0, 0));
    // The same shopper on another voucher is another key.
    assert_eq!(counts(persist(&ctx, &[msg(2, 7, w)]).await.unwrap()), (1, 0, 0));
    assert_eq!(
        counts(persist(&ctx, &[msg(3, 7, v)]).await.unwrap()),
        (0, 0, 1),
        "a second live order"
    );
    set_status(1, "cancelled").await;
    assert_eq!(
        counts(persist(&ctx, &[msg(4, 7, v)]).await.unwrap()),
        (1, 0, 0),
        "a cancelled order frees its shopper"
    );
    set_status(4, "paid").await;
    assert_eq!(
        counts(persist(&ctx, &[msg(5, 7, v)]).await.unwrap()),
        (0, 0, 1),
        "a paid order is live"
    );
    set_status(4, "cancelled").await;
    assert_eq!(counts(persist(&ctx, &[msg(6, 7, v)]).await.unwrap()), (1, 0, 0));
    // Two cancelled and two failed orders of one shopper stand side by side; a
    // status change to one that is live again is refused while another is live.
    let again = sqlx::query("UPDATE voucher_orders SET status = 'created' WHERE id = 1")
        .execute(app.pg())
        .await
        .expect_err("a second live order of shopper 7 by an update");
    assert_eq!(
        again.as_database_error().and_then(|e| e.code()).as_deref(),
        Some("23505")
    );
    let rows: Vec<(i64, String)> =
        sqlx::query_as("SELECT id, status FROM voucher_orders WHERE user_id = 7 AND voucher_id = $1 ORDER BY id")
            .bind(v)
            .fetch_all(app.pg())
            .await
            .unwrap();
    let rows: Vec<(i64, &str)> = rows.iter().map(|(i, s)| (*i, s.as_str())).collect();
    assert_eq!(
        rows,
        vec![
            (1, "cancelled"),
            (3, "failed"),
            (4, "cancelled"),
            (5, "failed"),
            (6, "created")
        ]
    );

    // Eight batches at once, each with an order of each of shoppers 1000..1010 on
    // w: one order per shopper is created, the other seven are failed.
    let batches: Vec<Vec<OrderMsg>> = (0..8)
        .map(|b| (0..10).map(|u| msg(100 + b * 10 + u, 1000 + u, w)).collect())
        .collect();
    let runs = batches.iter().map(|b| {
        let ctx = ctx.clone();
        let b = b.clone();
        tokio::spawn(async move {
            // Two batches waiting on each other's rows (a deadlock): the worker
            // tries such a failure again, and so does this test, a bounded number
            // of times.
            let mut retries = 0;
            loop {
                match persist(&ctx, &b).await {
                    Ok(o) => return o,
                    Err(e) if e.is_transient() && retries < 20 => retries += 1,
                    Err(e) => panic!("persisting a batch: {e}"),
                }
            }
        })
    });
    let (mut created, mut failed) = (0, 0);
    for r in futures::future::join_all(runs).await {
        let o = r.unwrap();
        created += o.created;
        failed += o.failed;
    }
    assert_eq!((created, failed), (10, 70));
    let live: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT user_id, count(*) FROM voucher_orders
          WHERE voucher_id = $1 AND user_id >= 1000 AND status = 'created' GROUP BY user_id ORDER BY user_id",
    )
    .bind(w)
    .fetch_all(app.pg())
    .await
    .unwrap();
    assert_eq!(live, (1000..1010).map(|u| (u, 1)).collect::<Vec<_>>());
    let stock: i32 = sqlx::query_scalar("SELECT stock FROM seckill_vouchers WHERE voucher_id = $1")
        .bind(w)
        .fetch_one(app.pg())
        .await
        .unwrap();
    assert_eq!(stock, 100 - 1 - 10, "the stock follows the orders created");
    app.shutdown().await;
}

/// The worker's backstop should ids or numbers ever be issued twice anyway: an
/// order whose id another order holds is stored under a fresh id (findable by the
/// id its shopper holds), an order whose number is taken is numbered again; both
/// are counted as incidents, neither is dropped nor failed (the first must not be
/// taken for a duplicate, nor the second stored `failed`).
#[tokio::test]
async fn the_worker_never_hides_an_id_or_number_collision() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(10).await;
    let epoch = 0i64;
    let now = chrono::Utc::now().timestamp_millis();
    let msg = |id: i64, user: i64| OrderMsg {
        id: seckill::id::OrderId::new(id),
        user_id: seckill::id::UserId::new(user),
        voucher_id: seckill::id::VoucherId::new(v),
        created_ms: now,
        epoch,
    };
    // A worker whose numbers are not checked by the witness (`sequence::witness`,
    // which would catch the counter set back below): the backstop behind it.
    let mut ctx = ctx(&app);
    let state = app.app().state();
    ctx.sequences = seckill::numbers::Sequences::new(state.handles.background_pg.clone(), state.clock.clone());
    let o = persist(&ctx, &[msg(7, 1)]).await.unwrap();
    assert_eq!(o.created, 1);
    // Another shopper's order with the same id.
    let o = persist(&ctx, &[msg(7, 2)]).await.unwrap();
    assert_eq!((o.created, o.duplicates, o.failed, o.id_collisions), (1, 0, 0, 1));
    let (id, status, issued): (i64, String, Option<i64>) =
        sqlx::query_as("SELECT id, status, issued_id FROM voucher_orders WHERE user_id = 2")
            .fetch_one(app.pg())
            .await
            .unwrap();
    assert!(id >= 1 << 62, "a fresh id: {id}");
    assert_eq!((status.as_str(), issued), ("created", Some(7)));
    // The same message again is a duplicate, not a second collision.
    let o = persist(&ctx, &[msg(7, 2)]).await.unwrap();
    assert_eq!((o.created, o.duplicates, o.id_collisions), (0, 1, 0));

    // The number counter goes back to 0 (as a Postgres restored from an older
    // backup would): the next two orders get numbers 1 and 2, already taken.
    let reset = sqlx::query("UPDATE counter_watermarks SET high = 0 WHERE scope LIKE 'seq:order:%'")
        .execute(app.pg())
        .await
        .unwrap();
    assert_eq!(reset.rows_affected(), 1);
    let o = persist(&ctx, &[msg(20, 3), msg(21, 4)]).await.unwrap();
    assert_eq!((o.created, o.failed, o.number_collisions), (2, 0, 2));
    let rows: Vec<(String, Option<String>)> = sqlx::query_as("SELECT status, order_no FROM voucher_orders")
        .fetch_all(app.pg())
        .await
        .unwrap();
    assert_eq!(rows.len(), 4);
    assert!(rows.iter().all(|r| r.0 == "created"));
    let numbers: HashSet<&Option<String>> = rows.iter().map(|r| &r.1).collect();
    assert_eq!(numbers.len(), 4, "{rows:?}");
    let stock: i32 = sqlx::query_scalar("SELECT stock FROM seckill_vouchers WHERE voucher_id = $1")
        .bind(v)
        .fetch_one(app.pg())
        .await
        .unwrap();
    assert_eq!(stock, 6);
}

/// Two shoppers' orders that share an id (ids issued twice) in one batch are two
/// orders: both stored, the second under a fresh id (`issued_id` the id its
/// shopper holds), counted as a collision; the batch delivered again stores
/// nothing more. The same through the locked way (a batch beyond the stock, where
/// orders already stored are set aside first): the stored one is set aside, the
/// other is not taken for it.
#[tokio::test]
async fn two_orders_that_share_an_id_in_one_batch_are_both_stored() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(10).await;
    let msg = |id, user| order(id, user, v);
    let ctx = ctx(&app);
    let batch = [msg(9, 1), msg(9, 2)];
    let o = persist(&ctx, &batch).await.unwrap();
    assert_eq!((o.created, o.duplicates, o.failed, o.id_collisions), (2, 0, 0, 1));
    let rows = |app: &TestApp| {
        let pg = app.pg().clone();
        async move {
            let rows: Vec<(i64, i64, String, Option<i64>)> = sqlx::query_as(
                "SELECT user_id, id, status, issued_id FROM voucher_orders WHERE voucher_id = $1 ORDER BY user_id",
            )
            .bind(v)
            .fetch_all(&pg)
            .await
            .unwrap();
            rows
        }
    };
    let stored = rows(&app).await;
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert!(stored.iter().all(|r| r.2 == "created"), "{stored:?}");
    // Each findable by the id its shopper holds.
    assert!(stored.iter().all(|r| r.1 == 9 || r.3 == Some(9)), "{stored:?}");
    assert_eq!(stored.iter().filter(|r| r.3 == Some(9)).count(), 1, "{stored:?}");
    // Delivered again: both recognised, nothing more stored.
    let o = persist(&ctx, &batch).await.unwrap();
    assert_eq!((o.created, o.duplicates, o.id_collisions), (0, 2, 0));
    assert_eq!(rows(&app).await, stored);

    // The locked way: a sale with one unit left in Postgres, a batch of three
    // (beyond the stock) whose first is stored already and whose second shares
    // its id.
    let w = app.flash_sale(2).await;
    let at = |id, user| order(id, user, w);
    let o = persist(&ctx, &[at(30, 5)]).await.unwrap();
    assert_eq!(o.created, 1);
    let o = persist(&ctx, &[at(30, 5), at(30, 6), at(31, 7)]).await.unwrap();
    assert_eq!(
        (o.created, o.duplicates, o.id_collisions, o.failed),
        (1, 1, 1, 1),
        "the repeat set aside, the other order under id 30 created under a fresh id, the third beyond the stock"
    );
    let users: Vec<(i64, String)> =
        sqlx::query_as("SELECT user_id, status FROM voucher_orders WHERE voucher_id = $1 ORDER BY user_id")
            .bind(w)
            .fetch_all(app.pg())
            .await
            .unwrap();
    assert_eq!(
        users,
        vec![(5, "created".into()), (6, "created".into()), (7, "failed".into())]
    );
}

/// A relay's intent naming two shoppers' orders that share an id is swept only
/// once both are stored: the one stored under that id is not taken for the other
/// (whose order a repair must still count as in flight until it arrives).
#[tokio::test]
async fn an_intent_is_swept_only_once_each_of_its_shoppers_orders_is_stored() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(10).await;
    let msg = |id, user| order(id, user, v);
    let ctx = ctx(&app);
    let keys = app.app().state().handles.keys.clone();
    let intent = seckill::ordering::outbox::relay::intent::record(
        app.pg(),
        keys.namespace(),
        &[msg(40, 1), msg(40, 2)],
        &[],
        "test",
        false,
    )
    .await
    .unwrap();
    assert!(intent.is_some(), "recorded");
    let sweep = || seckill::ordering::outbox::relay::intent::sweep(app.pg(), keys.namespace());
    assert_eq!(sweep().await.unwrap(), 0, "nothing stored yet");
    assert_eq!(persist(&ctx, &[msg(40, 1)]).await.unwrap().created, 1);
    assert_eq!(
        sweep().await.unwrap(),
        0,
        "shopper 2's order under id 40 is not stored yet"
    );
    let o = persist(&ctx, &[msg(40, 2)]).await.unwrap();
    assert_eq!((o.created, o.id_collisions), (1, 1));
    assert_eq!(sweep().await.unwrap(), 1, "both stored (the second under a fresh id)");
}

/// An order the worker stores `failed` (Postgres has no stock left for it: Redis
/// and Postgres out of step) moves the worker's incident counter.
#[tokio::test]
async fn a_failed_order_is_counted_as_an_incident() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns).forces_incidents(&["failed"]).spawn().await;
    let v = app.flash_sale(10).await;
    sqlx::query("UPDATE seckill_vouchers SET stock = 0 WHERE voucher_id = $1")
        .bind(v)
        .execute(app.pg())
        .await
        .unwrap();
    assert_eq!(app.order(v, 1).await.0, reqwest::StatusCode::ACCEPTED);
    let failed = "seckill_worker_incidents_total{kind=\"failed\"}";
    let counted = eventually(Duration::from_secs(20), || async {
        (app.metric(failed).await == 1.0).then_some(())
    })
    .await;
    assert!(counted.is_some(), "the failed order counted as an incident");
    let status: String = sqlx::query_scalar("SELECT status FROM voucher_orders WHERE user_id = 1")
        .fetch_one(app.pg())
        .await
        .unwrap();
    assert_eq!(status, "failed");
}

/// A refused message's orders are stored `failed` each once: one whose id
/// another shopper's order holds is stored under a fresh id, not skipped.
#[tokio::test]
async fn a_refused_message_stores_an_order_whose_id_another_holds() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(10).await;
    let msg = |id, user| order(id, user, v);
    assert_eq!(persist(&ctx(&app), &[msg(50, 1)]).await.unwrap().created, 1);
    let stored = seckill::ordering::worker::persist::store_failed(app.pg(), &[msg(50, 2), msg(50, 2)], "refused")
        .await
        .unwrap();
    assert_eq!(stored, 1, "shopper 2's order, once");
    let again = seckill::ordering::worker::persist::store_failed(app.pg(), &[msg(50, 2)], "refused")
        .await
        .unwrap();
    assert_eq!(again, 0, "stored already");
    let (status, issued): (String, Option<i64>) =
        sqlx::query_as("SELECT status, issued_id FROM voucher_orders WHERE user_id = 2")
            .fetch_one(app.pg())
            .await
            .unwrap();
    assert_eq!((status.as_str(), issued), ("failed", Some(50)));
}

/// One shopper with two orders under one id (two sales; ids issued twice): the id
/// names one of them, always the same (the one stored under it): a second pay or
/// a cancel after the pay is refused, never applied to the other order.
#[tokio::test]
async fn one_id_names_one_order_of_its_shopper() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let (v, w) = (app.flash_sale(10).await, app.flash_sale(10).await);
    let msg = |voucher| order(60, 1, voucher);
    let ctx = ctx(&app);
    assert_eq!(persist(&ctx, &[msg(v)]).await.unwrap().created, 1);
    let o = persist(&ctx, &[msg(w)]).await.unwrap();
    assert_eq!((o.created, o.id_collisions), (1, 1));
    let me = app.shopper(1);
    let (s, body) = app.get("/api/v1/orders/60", Some(&me)).await;
    assert_eq!(
        (s, body["voucher_id"].as_str()),
        (reqwest::StatusCode::OK, Some(v.to_string().as_str())),
        "{body}"
    );
    let (s, body) = app
        .post("/api/v1/orders/60/pay", Some(&me), serde_json::json!({}))
        .await;
    assert_eq!(
        (s, body["status"].as_str()),
        (reqwest::StatusCode::OK, Some("paid")),
        "{body}"
    );
    let (s, body) = app
        .post("/api/v1/orders/60/pay", Some(&me), serde_json::json!({}))
        .await;
    assert_eq!(s, reqwest::StatusCode::CONFLICT, "{body}");
    let (s, body) = app
        .post("/api/v1/orders/60/cancel", Some(&me), serde_json::json!({}))
        .await;
    assert_eq!(s, reqwest::StatusCode::CONFLICT, "{body}");
    let statuses: Vec<(i64, String)> =
        sqlx::query_as("SELECT voucher_id, status FROM voucher_orders WHERE user_id = 1 ORDER BY voucher_id")
            .fetch_all(app.pg())
            .await
            .unwrap();
    assert_eq!(statuses, vec![(v, "paid".into()), (w, "created".into())]);
}

/// A batch goes in whole when nothing in it is stored yet; when part of it is (a
/// redelivery merged with new orders), that attempt is rolled back to its
/// savepoint and the new orders are still created, each once, in the same
/// transaction as their stock.
#[tokio::test]
async fn a_batch_that_partly_conflicts_still_creates_its_new_orders_once() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(10).await;
    let now = chrono::Utc::now().timestamp_millis();
    let epoch = 0i64;
    let msg = |id: i64| OrderMsg {
        id: seckill::id::OrderId::new(id),
        user_id: seckill::id::UserId::new(500 + id),
        voucher_id: seckill::id::VoucherId::new(v),
        created_ms: now + id,
        epoch,
    };
    let ctx = ctx(&app);
    let o = persist(&ctx, &[msg(1), msg(2)]).await.unwrap();
    assert_eq!((o.created, o.duplicates, o.failed), (2, 0, 0));
    // 2 is stored already: the plain insert conflicts, the tolerant one skips it.
    let o = persist(&ctx, &[msg(2), msg(3), msg(4)]).await.unwrap();
    assert_eq!((o.created, o.duplicates, o.failed), (2, 1, 0));
    let o = persist(&ctx, &[msg(5)]).await.unwrap();
    assert_eq!((o.created, o.duplicates, o.failed), (1, 0, 0));
    let (rows, numbers): (i64, i64) =
        sqlx::query_as("SELECT count(*), count(DISTINCT order_no) FROM voucher_orders WHERE status = 'created'")
            .fetch_one(app.pg())
            .await
            .unwrap();
    assert_eq!((rows, numbers), (5, 5), "each order once, each with its own number");
    let stock: i32 = sqlx::query_scalar("SELECT stock FROM seckill_vouchers WHERE voucher_id = $1")
        .bind(v)
        .fetch_one(app.pg())
        .await
        .unwrap();
    assert_eq!(stock, 5, "the stock follows the orders created");
}

/// The common case goes in by a binary `COPY`: every field of every order arrives
/// as the message had it (ids, shopper, sale, the admission time to the
/// millisecond, status, a business number of its own, no failure, no other id).
/// A batch that then conflicts falls back to the tolerant insert, as the plain
/// one did.
#[tokio::test]
async fn a_copied_batch_stores_every_field_as_given() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(300).await;
    let base = chrono::Utc::now().timestamp_millis();
    let epoch = 0i64;
    // Ids and shoppers past 2^32, times a few ms apart with odd milliseconds.
    let orders: Vec<OrderMsg> = (0..250)
        .map(|i| OrderMsg {
            id: seckill::id::OrderId::new((1 << 40) + i * 7),
            user_id: seckill::id::UserId::new((1 << 35) + i * 13),
            voucher_id: seckill::id::VoucherId::new(v),
            created_ms: base - 86_400_000 + i * 3 + 1,
            epoch,
        })
        .collect();
    let ctx = ctx(&app);
    let o = persist(&ctx, &orders).await.unwrap();
    assert_eq!((o.created, o.duplicates, o.failed), (250, 0, 0));
    assert_eq!(o.tolerant_inserts, 0, "the rows went in by the COPY");
    type Stored = (i64, i64, i64, i64, String, Option<String>, Option<String>, Option<i64>);
    let stored: Vec<Stored> = sqlx::query_as(
        "SELECT id, user_id, voucher_id, (extract(epoch FROM created_at) * 1000)::int8, status, order_no,
                failure, issued_id
           FROM voucher_orders ORDER BY id",
    )
    .fetch_all(app.pg())
    .await
    .unwrap();
    assert_eq!(stored.len(), orders.len());
    let mut numbers = HashSet::new();
    for (o, s) in orders.iter().zip(&stored) {
        assert_eq!(
            (s.0, s.1, s.2, s.3, s.4.as_str()),
            (o.id.get(), o.user_id.get(), o.voucher_id.get(), o.created_ms, "created")
        );
        let n = s.5.clone().expect("a created order has a number");
        assert!(n.len() > 8, "{n} is a business number");
        assert!(numbers.insert(n), "each number once");
        assert_eq!((s.6.as_deref(), s.7), (None, None));
    }
    // 25 of them again with 25 new orders: the copy conflicts, the tolerant insert
    // stores the new ones once.
    let again: Vec<OrderMsg> = orders[..25]
        .iter()
        .copied()
        .chain((0..25).map(|i| OrderMsg {
            id: seckill::id::OrderId::new((1 << 41) + i),
            user_id: seckill::id::UserId::new((1 << 36) + i),
            voucher_id: seckill::id::VoucherId::new(v),
            created_ms: base + i,
            epoch,
        }))
        .collect();
    let o = persist(&ctx, &again).await.unwrap();
    assert_eq!((o.created, o.duplicates, o.failed), (25, 25, 0));
    assert_eq!(o.tolerant_inserts, 1, "the conflict took the tolerant insert");
    let stock: i32 = sqlx::query_scalar("SELECT stock FROM seckill_vouchers WHERE voucher_id = $1")
        .bind(v)
        .fetch_one(app.pg())
        .await
        .unwrap();
    assert_eq!(stock, 25, "the stock follows the orders created");
}

/// The relay's intents of a batch are deleted by the transaction that stores it:
/// while another transaction holds an intent's row, the batch's orders are not
/// visible either (the delete is inside their transaction, before its commit);
/// gone with its orders stored; kept when the database refuses the batch (its
/// transaction rolled back; the sweep deletes them once their orders are stored).
#[tokio::test]
async fn a_batch_and_its_relay_intents_commit_together() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(10).await;
    let now = chrono::Utc::now().timestamp_millis();
    let epoch = 0i64;
    let ctx = ctx(&app);
    let msg = |id: i64, voucher: i64| OrderMsg {
        id: seckill::id::OrderId::new(id),
        user_id: seckill::id::UserId::new(900 + id),
        voucher_id: seckill::id::VoucherId::new(voucher),
        created_ms: now + id,
        epoch,
    };
    let intent = |orders: Vec<OrderMsg>| {
        let (pg, namespace) = (app.pg().clone(), ctx.keys.namespace().to_owned());
        async move {
            let (vouchers, ids): (Vec<i64>, Vec<i64>) = orders.iter().map(|o| (o.voucher_id.get(), o.id.get())).unzip();
            sqlx::query_scalar::<_, i64>(
                "INSERT INTO relay_intents (namespace, epoch, voucher_ids, order_ids) VALUES ($1, $2, $3, $4) RETURNING id",
            )
            .bind(namespace)
            .bind(epoch)
            .bind(vouchers)
            .bind(ids)
            .fetch_one(&pg)
            .await
            .unwrap()
        }
    };
    let intents_left = || async {
        sqlx::query_scalar::<_, i64>("SELECT id FROM relay_intents ORDER BY id")
            .fetch_all(app.pg())
            .await
            .unwrap()
    };
    let stored = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM voucher_orders")
            .fetch_one(app.pg())
            .await
            .unwrap()
    };
    let (a, b) = (vec![msg(1, v), msg(2, v)], vec![msg(3, v)]);
    let (ia, ib) = (intent(a.clone()).await, intent(b.clone()).await);
    let batch: Vec<OrderMsg> = a.iter().chain(&b).copied().collect();
    // Another transaction holds intent `ib`'s row: the batch's delete waits for it.
    let mut holder = app.pg().begin().await.unwrap();
    sqlx::query("SELECT 1 FROM relay_intents WHERE id = $1 FOR UPDATE")
        .bind(ib)
        .execute(&mut *holder)
        .await
        .unwrap();
    let persisting = tokio::spawn({
        let (ctx, batch) = (ctx.clone(), batch.clone());
        async move { persist_relayed(&ctx, &batch, &[ia, ib]).await.unwrap() }
    });
    // Until the batch's transaction is seen waiting on that row.
    until_a_statement_waits_for_a_lock(app.pg(), "DELETE FROM relay_intents%").await;
    assert_eq!(stored().await, 0, "no order visible before its intents are gone");
    holder.rollback().await.unwrap();
    let o = persisting.await.unwrap();
    assert_eq!((o.created, o.duplicates, o.failed), (3, 0, 0));
    assert_eq!(stored().await, 3);
    assert_eq!(intents_left().await, Vec::<i64>::new(), "deleted with the batch");

    // A voucher Postgres does not know: the insert check refuses the statement,
    // the transaction rolls back, the intent stays.
    let missing = vec![msg(4, v + 1_000_000)];
    let im = intent(missing.clone()).await;
    assert!(persist_relayed(&ctx, &missing, &[im]).await.is_err());
    assert_eq!(intents_left().await, vec![im], "kept when nothing was stored");

    // A redelivered batch (every order stored already) deletes its intent too (or
    // the app's sweep did first: either way it is gone).
    let ir = intent(a.clone()).await;
    let o = persist_relayed(&ctx, &a, &[ir]).await.unwrap();
    assert_eq!((o.created, o.duplicates, o.failed), (0, 2, 0));
    assert_eq!(intents_left().await, vec![im]);
}

/// Batches of one sale (and of two sales at once, in either order) persisted at
/// the same time, more orders than the stock, some redelivered meanwhile: the
/// batches insert in parallel and take the stock last (`persist::unlocked`), or go
/// the locked way once the stock runs short. Exactly the stock is created, each
/// order once, the rest failed; Postgres's stock ends at 0, never below; every
/// business number is issued once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batches_of_one_sale_persisted_at_once_never_take_more_than_its_stock() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let (v, w) = (app.flash_sale(50).await, app.flash_sale(30).await);
    let now = chrono::Utc::now().timestamp_millis();
    let epoch = 0i64;
    let msg = |id: i64, voucher: i64| OrderMsg {
        id: seckill::id::OrderId::new(id),
        user_id: seckill::id::UserId::new(1_000 + id),
        voucher_id: seckill::id::VoucherId::new(voucher),
        created_ms: now + id,
        epoch,
    };
    // 16 batches of 10 for v (160 orders for 50 units); 6 batches of 10 mixing v
    // and w (w first in half of them); each of the first four sent twice.
    let mut batches: Vec<Vec<OrderMsg>> = (0..16)
        .map(|b| (0..10).map(|i| msg(1 + b * 10 + i, v)).collect())
        .collect();
    for b in 0..6 {
        let mut mixed: Vec<OrderMsg> = (0..10)
            .map(|i| msg(1_000 + b * 10 + i, if i % 2 == 0 { v } else { w }))
            .collect();
        if b % 2 == 1 {
            mixed.reverse();
        }
        batches.push(mixed);
    }
    for b in 0..4 {
        batches.push(batches[b].clone());
    }
    let ctx = ctx(&app);
    let runs = batches.into_iter().map(|orders| {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            // As the worker does: a passing error (a deadlock Postgres broke) is
            // tried again.
            let mut retries = 0;
            loop {
                match persist(&ctx, &orders).await {
                    Ok(o) => return (o, retries),
                    Err(e) if e.is_transient() && retries < 20 => retries += 1,
                    Err(e) => panic!("persisting a batch: {e}"),
                }
            }
        })
    });
    let outcomes = futures::future::join_all(runs).await;
    let (mut created, mut failed, mut retries, mut renumbered) = (0, 0, 0, 0);
    for r in outcomes {
        let (o, n) = r.unwrap();
        created += o.created;
        failed += o.failed;
        retries += n;
        renumbered += o.number_collisions + o.id_collisions;
    }
    // A number handed out twice would show here (the unique index makes the
    // worker number the order again), not as two orders with one number.
    assert_eq!(renumbered, 0, "no business number or id issued twice");
    let counts: Vec<(i64, String, i64)> =
        sqlx::query_as("SELECT voucher_id, status, count(*) FROM voucher_orders GROUP BY 1, 2 ORDER BY 1, 2")
            .fetch_all(app.pg())
            .await
            .unwrap();
    assert_eq!(
        counts,
        vec![
            (v, "created".to_owned(), 50),
            (v, "failed".to_owned(), 160 + 30 - 50),
            (w, "created".to_owned(), 30)
        ],
        "{retries} retries"
    );
    assert_eq!((created, failed), (80, 140), "each order counted once");
    let stocks: Vec<i32> = sqlx::query_scalar("SELECT stock FROM seckill_vouchers ORDER BY voucher_id")
        .fetch_all(app.pg())
        .await
        .unwrap();
    assert_eq!(stocks, vec![0, 0]);
    let numbers: Vec<String> = sqlx::query_scalar("SELECT order_no FROM voucher_orders WHERE status = 'created'")
        .fetch_all(app.pg())
        .await
        .unwrap();
    assert_eq!(numbers.iter().collect::<HashSet<_>>().len(), 80, "every number once");
    app.shutdown().await;
}
