//! pipeline: `orders_accepted_by_a_process_killed_before_publishing_are_not_lost`,
//! `entries_left_pending_by_a_dead_relay_are_claimed_and_delivered`,
//! `the_same_message_delivered_twice_writes_each_order_once`,
//! `a_poison_message_is_dead_lettered_and_kept_for_people`,
//! `an_order_batch_on_the_dead_letter_queue_is_persisted`,
//! `orders_whose_delivery_limit_ran_out_while_postgres_was_down_are_persisted`.
use super::*;

/// The API dies right after the Lua, before anything was published: the orders
/// are in the outbox, and a relay that runs later delivers every one.
#[tokio::test]
async fn orders_accepted_by_a_process_killed_before_publishing_are_not_lost() {
    let ns = Namespace::new().await;
    let api = TestApp::builder(&ns).api_only().spawn().await;
    let v = api.flash_sale(50).await;
    let mut accepted = HashSet::new();
    for user in 1..=30 {
        let (status, body) = api.order(v, user).await;
        assert_eq!(status, StatusCode::ACCEPTED);
        accepted.insert(body["order_id"].as_str().unwrap().parse::<i64>().unwrap());
    }
    api.crash().await;

    let app = TestApp::spawn(&ns).await;
    wait_persisted(&app, v, 30).await;
    let ids: HashSet<i64> = sqlx::query_scalar("SELECT id FROM voucher_orders WHERE voucher_id = $1")
        .bind(v)
        .fetch_all(app.pg())
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(ids, accepted, "exactly the acknowledged orders, none lost, none extra");
    app.shutdown().await;
}

/// A relay read entries and died before publishing them: another relay claims them
/// once they have been pending longer than the claim timeout.
#[tokio::test]
async fn entries_left_pending_by_a_dead_relay_are_claimed_and_delivered() {
    let ns = Namespace::new().await;
    let api = TestApp::builder(&ns).relay(false).spawn().await;
    let v = api.flash_sale(20).await;
    for user in 1..=10 {
        assert_eq!(api.order(v, user).await.0, StatusCode::ACCEPTED);
    }
    // A relay that reads and then dies: the entries sit in its pending list.
    let mut redis = api.redis().await;
    let read: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(seckill::keys::RELAY_GROUP)
        .arg("relay-dead")
        .arg("COUNT")
        .arg(100)
        .arg("STREAMS")
        .arg(ns.keys().outbox(v))
        .arg(">")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_ne!(read, redis::Value::Nil);
    api.shutdown().await;

    let app = TestApp::builder(&ns)
        .env("SECKILL_RELAY_CLAIM_IDLE_MS", "300")
        .spawn()
        .await;
    wait_persisted(&app, v, 10).await;
    let pending: redis::Value = redis::cmd("XPENDING")
        .arg(ns.keys().outbox(v))
        .arg(seckill::keys::RELAY_GROUP)
        .query_async(&mut redis)
        .await
        .map_err(|e| format!("{e:?}"))
        .unwrap();
    let redis::Value::Array(parts) = pending else {
        panic!("{pending:?}")
    };
    assert_eq!(parts[0], redis::Value::Int(0), "nothing left pending");
    app.shutdown().await;
}

#[tokio::test]
async fn the_same_message_delivered_twice_writes_each_order_once() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(10).await;
    let now = chrono::Utc::now().timestamp_millis();
    let batch = OrderBatch {
        orders: (1..=5)
            .map(|i| OrderMsg {
                id: seckill::id::OrderId::new(1_000_000 + i),
                user_id: seckill::id::UserId::new(500 + i),
                voucher_id: seckill::id::VoucherId::new(v),
                created_ms: now,
                epoch: 1,
            })
            .collect(),
        intent: None,
    };
    let body = serde_json::to_vec(&batch).unwrap();
    publish_raw(&ns, &body).await;
    publish_raw(&ns, &body).await;
    wait_persisted(&app, v, 5).await;
    let metrics = app.app().state().metrics.clone();
    eventually(Duration::from_secs(10), || {
        let m = metrics.clone();
        async move { (m.orders_persisted.with_label_values(&["duplicate"]).get() >= 5).then_some(()) }
    })
    .await
    .expect("the second delivery is recognised as duplicates");
    assert_eq!(persisted(&app, v).await, 5);
    let pg_stock: i32 = sqlx::query_scalar("SELECT stock FROM seckill_vouchers WHERE voucher_id = $1")
        .bind(v)
        .fetch_one(app.pg())
        .await
        .unwrap();
    assert_eq!(pg_stock, 5, "stock decremented once per order");
    app.shutdown().await;
}

#[tokio::test]
async fn a_poison_message_is_dead_lettered_and_kept_for_people() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    publish_raw(&ns, b"this is not an order batch").await;
    let pg = app.pg().clone();
    let (body, reason): (Vec<u8>, String) = eventually(Duration::from_secs(10), || {
        let pg = pg.clone();
        async move {
            sqlx::query_as("SELECT body, reason FROM dead_letters")
                .fetch_optional(&pg)
                .await
                .unwrap()
        }
    })
    .await
    .expect("the poison message is kept in dead_letters");
    assert_eq!(&body[..], b"this is not an order batch");
    assert!(reason.starts_with("not an order batch"), "{reason}");
    assert_eq!(app.app().state().metrics.worker_poison.get(), 1);
    app.shutdown().await;
}

/// An order batch that RabbitMQ dead-lettered (its delivery limit ran out through
/// crashes and hand-backs) is persisted from the dead-letter queue: no acknowledged
/// order ends there unaccounted for.
#[tokio::test]
async fn an_order_batch_on_the_dead_letter_queue_is_persisted() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns).forces_incidents(&["dead_lettered"]).spawn().await;
    let v = app.flash_sale(10).await;
    let epoch = 0i64;
    let now = chrono::Utc::now().timestamp_millis();
    let batch = OrderBatch {
        orders: (1..=3)
            .map(|i| OrderMsg {
                id: seckill::id::OrderId::new(2_000_000 + i),
                user_id: seckill::id::UserId::new(700 + i),
                voucher_id: seckill::id::VoucherId::new(v),
                created_ms: now,
                epoch,
            })
            .collect(),
        intent: None,
    };
    let b = ns.broker();
    let (conn, ch) = b.open().await.unwrap();
    ch.confirm_select(Default::default()).await.unwrap();
    ch.basic_publish(
        ns.keys().dead_exchange().into(),
        "".into(),
        BasicPublishOptions::default(),
        &serde_json::to_vec(&batch).unwrap(),
        BasicProperties::default(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    wait_persisted(&app, v, 3).await;
    let statuses: Vec<String> = sqlx::query_scalar("SELECT status FROM voucher_orders WHERE voucher_id = $1")
        .bind(v)
        .fetch_all(app.pg())
        .await
        .unwrap();
    assert_eq!(statuses, vec!["created"; 3]);
    assert_eq!(
        app.incidents(),
        vec![("dead_lettered".to_owned(), 1)],
        "the dead-lettered batch is the one incident"
    );
    conn.close(200, "done".into()).await.unwrap();
    app.shutdown().await;
}

/// With a delivery limit of 1, a worker that cannot reach Postgres hands its batch
/// back (the hold limit) and the broker dead-letters it; once Postgres is back the
/// orders are persisted all the same rather than left on the dead-letter queue,
/// neither persisted nor failed. (The relay publishes only what it could record as
/// published in Postgres, see `ordering::outbox::relay::intent`: the orders are published
/// before Postgres goes, and a worker starts after.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_whose_delivery_limit_ran_out_while_postgres_was_down_are_persisted() {
    let ns = Namespace::new().await;
    let limits = [("SECKILL_DELIVERY_LIMIT", "1"), ("SECKILL_WORKER_HOLD_MS", "300")];
    let mut builder = TestApp::builder(&ns).worker(false);
    for (k, val) in limits {
        builder = builder.env(k, val);
    }
    let app = builder.spawn().await;
    let v = app.flash_sale(100).await;
    let published_first: i64 = 20;
    for u in 1..=published_first {
        assert_eq!(app.order(v, u).await.0, StatusCode::ACCEPTED);
    }
    wait_published(&app, &ns, published_first as u64).await;
    let admin = sqlx::PgPool::connect(&admin_db_url()).await.unwrap();
    sqlx::query(&format!("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false", ns.db))
        .execute(&admin)
        .await
        .unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
        .bind(&ns.db)
        .execute(&admin)
        .await
        .unwrap();
    let mut builder = TestApp::builder(&ns)
        .mode(Mode::Worker)
        .forces_incidents(&["dead_lettered"]);
    for (k, val) in limits {
        builder = builder.env(k, val);
    }
    let worker = builder.spawn().await;
    // For longer than the Redis check period (its Postgres reads fail now), every
    // order is still accepted: a Postgres outage does not stop sales.
    let until = std::time::Instant::now() + 2 * seckill::recovery::desk::REFRESH_EVERY + Duration::from_millis(500);
    let mut u = published_first;
    while std::time::Instant::now() < until || u < 2 * published_first {
        u += 1;
        let (status, body) = app.order(v, u).await;
        assert_eq!(
            status,
            StatusCode::ACCEPTED,
            "shopper {u} while Postgres is down: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let accepted = u;
    // Handed back at least twice: past the limit of 1, the broker dead-letters it,
    // and the worker takes it from there.
    let metrics = worker.app().state().metrics.clone();
    eventually(Duration::from_secs(30), || {
        let m = metrics.clone();
        async move { (m.worker_incidents.with_label_values(&["dead_lettered"]).get() > 0).then_some(()) }
    })
    .await
    .expect("the batch reaches the dead-letter queue");
    sqlx::query(&format!("ALTER DATABASE {} WITH ALLOW_CONNECTIONS true", ns.db))
        .execute(&admin)
        .await
        .unwrap();
    wait_persisted(&app, v, accepted).await;
    let failed: i64 = sqlx::query_scalar("SELECT count(*) FROM voucher_orders WHERE status <> 'created'")
        .fetch_one(app.pg())
        .await
        .unwrap();
    assert_eq!(failed, 0);
    worker.shutdown().await;
    app.shutdown().await;
}
