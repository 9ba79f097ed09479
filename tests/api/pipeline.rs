//! From the outbox to Postgres: nothing acknowledged is lost or written twice when
//! the API dies before publishing, a relay dies holding entries, a message comes
//! twice, is poison or dead-lettered, or Postgres is away; order ids stay unique when
//! Redis loses their counter.
use crate::helpers::*;
use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::BasicProperties;
use reqwest::StatusCode;
use seckill::app::Mode;
use seckill::broker::ORDERS_ROUTING_KEY;
use seckill::order::model::{OrderBatch, OrderMsg};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

async fn persisted(app: &TestApp, v: i64) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM voucher_orders WHERE voucher_id = $1 AND status = 'created'")
        .bind(v)
        .fetch_one(app.pg())
        .await
        .unwrap()
}

async fn wait_persisted(app: &TestApp, v: i64, n: i64) {
    let got = eventually(Duration::from_secs(20), || async {
        (persisted(app, v).await == n).then_some(())
    })
    .await;
    assert!(
        got.is_some(),
        "expected {n} persisted orders, have {}",
        persisted(app, v).await
    );
}

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

/// Messages ready in the namespace's orders queue (delivered ones do not count).
async fn orders_ready(ns: &Namespace) -> u32 {
    let (conn, ch) = ns.broker().open().await.unwrap();
    let queue = ch
        .queue_declare(
            ns.keys().orders_queue().into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    conn.close(200, "done".into()).await.unwrap();
    queue.message_count()
}

async fn publish_raw(ns: &Namespace, body: &[u8]) {
    let b = ns.broker();
    let (conn, ch) = b.open().await.unwrap();
    ch.confirm_select(Default::default()).await.unwrap();
    let confirm = ch
        .basic_publish(
            ns.keys().orders_exchange().into(),
            ORDERS_ROUTING_KEY.into(),
            BasicPublishOptions::default(),
            body,
            BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(confirm.is_ack());
    conn.close(200, "done".into()).await.unwrap();
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
                id: 1_000_000 + i,
                user_id: 500 + i,
                voucher_id: v,
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
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(10).await;
    let epoch = current_epoch(&app).await;
    let now = chrono::Utc::now().timestamp_millis();
    let batch = OrderBatch {
        orders: (1..=3)
            .map(|i| OrderMsg {
                id: 2_000_000 + i,
                user_id: 700 + i,
                voucher_id: v,
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
    conn.close(200, "done".into()).await.unwrap();
    app.shutdown().await;
}

/// With a delivery limit of 1, a worker that cannot reach Postgres hands its batch
/// back (the hold limit) and the broker dead-letters it; once Postgres is back the
/// orders are persisted all the same rather than left on the dead-letter queue,
/// neither persisted nor failed. (The relay publishes only what it could record as
/// published in Postgres, see `outbox::relay::intent`: the orders are published
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
    let mut builder = TestApp::builder(&ns).mode(Mode::Worker);
    for (k, val) in limits {
        builder = builder.env(k, val);
    }
    let worker = builder.spawn().await;
    // For longer than the Redis check period (its Postgres reads fail now), every
    // order is still accepted: a Postgres outage does not stop sales.
    let until = std::time::Instant::now() + 2 * seckill::epoch::CHECK_EVERY + Duration::from_millis(500);
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

/// Postgres refuses connections for a while: the worker backs off holding the
/// messages it received, orders go on being accepted, and the relay publishes none
/// of them (it publishes only what it recorded in Postgres as published, see
/// `outbox::relay::intent`): they wait in the outbox. Once Postgres is back every
/// accepted order is persisted, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_unavailable_then_back_loses_nothing() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns).worker(false).spawn().await;
    let v = app.flash_sale(100).await;
    for user in 1..=40 {
        assert_eq!(app.order(v, user).await.0, StatusCode::ACCEPTED);
    }
    wait_published(&app, &ns, 40).await;
    let admin = sqlx::PgPool::connect(&admin_db_url()).await.unwrap();
    // Only this test's database goes down: no new connections, existing ones cut.
    sqlx::query(&format!("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false", ns.db))
        .execute(&admin)
        .await
        .unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
        .bind(&ns.db)
        .execute(&admin)
        .await
        .unwrap();
    let worker = TestApp::builder(&ns).mode(Mode::Worker).spawn().await;
    for user in 41..=80 {
        assert_eq!(
            app.order(v, user).await.0,
            StatusCode::ACCEPTED,
            "the hot path needs no Postgres"
        );
    }
    // The worker holds the 40 published orders: none ready in the queue.
    eventually(Duration::from_secs(20), || async {
        (orders_ready(&ns).await == 0).then_some(())
    })
    .await
    .expect("the worker holds the orders while Postgres is away");
    assert_eq!(
        app.app().state().metrics.relay_published.get(),
        40,
        "nothing is published while no intent can be recorded"
    );
    sqlx::query(&format!("ALTER DATABASE {} WITH ALLOW_CONNECTIONS true", ns.db))
        .execute(&admin)
        .await
        .unwrap();
    wait_persisted(&app, v, 80).await;
    let all: i64 = sqlx::query_scalar("SELECT count(*) FROM voucher_orders")
        .fetch_one(app.pg())
        .await
        .unwrap();
    assert_eq!(all, 80, "none doubled, none failed");
    admin.close().await;
    worker.shutdown().await;
    app.shutdown().await;
}

/// Until the relay has published `n` orders and they wait in the queue (read
/// through the application's own broker settings: its queue arguments may differ
/// from the namespace's defaults).
async fn wait_published(app: &TestApp, ns: &Namespace, n: u64) {
    let state = app.app().state();
    let ready = || async {
        let (conn, ch) = state.broker.open().await.ok()?;
        let passive = QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        let q = ch
            .queue_declare(ns.keys().orders_queue().into(), passive, FieldTable::default())
            .await
            .ok()?;
        let _ = conn.close(200, "done".into()).await;
        Some(q.message_count() as u64)
    };
    let seen = eventually(Duration::from_secs(20), || async {
        let (published, ready) = (state.metrics.relay_published.get(), ready().await?);
        // Messages carry batches: with no consumer, every published one is ready.
        (published >= n && ready > 0).then_some(())
    })
    .await;
    assert!(
        seen.is_some(),
        "the orders published: {} published, {:?} ready",
        state.metrics.relay_published.get(),
        ready().await
    );
}

/// Ids never repeat across instances, even when Redis loses the counter mid-day.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn order_ids_stay_unique_after_the_counter_key_is_deleted() {
    let ns = Namespace::new().await;
    let small_blocks = || TestApp::builder(&ns).env("SECKILL_ID_BLOCK", "7").mode(Mode::Serve);
    let a = Arc::new(small_blocks().spawn().await);
    let b = Arc::new(small_blocks().spawn().await);
    let draw = |app: Arc<TestApp>, n: usize| async move {
        let ids = app.app().state().ids.clone();
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(ids.next_id().await.unwrap());
        }
        out
    };
    let mut seen = HashSet::new();
    for round in 0..3 {
        let (x, y) = tokio::join!(tokio::spawn(draw(a.clone(), 300)), tokio::spawn(draw(b.clone(), 300)));
        for id in x.unwrap().into_iter().chain(y.unwrap()) {
            assert!(id > 0);
            assert!(seen.insert(id), "id {id} issued twice (round {round})");
        }
        // Redis loses every counter key of this namespace.
        let mut redis = a.redis().await;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}:ctr:*", ns.name))
            .query_async(&mut redis)
            .await
            .unwrap();
        assert!(!keys.is_empty());
        let _: () = redis::cmd("DEL").arg(keys).query_async(&mut redis).await.unwrap();
    }
    assert_eq!(seen.len(), 1800);
}

/// The relay reads the outboxes Redis lists, not only those of the sales its
/// voucher cache knows: with an empty cache, orders still flow.
#[tokio::test]
async fn the_relay_finds_outboxes_without_the_voucher_cache() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns).api_only().spawn().await;
    let v = app.flash_sale(10).await;
    for u in 1..=3 {
        assert_eq!(app.order(v, u).await.0, StatusCode::ACCEPTED);
    }
    let state = app.app().state();
    let relay = seckill::outbox::Relay::new(
        seckill::outbox::relay::Ends {
            redis: state.redis.clone(),
            broker: state.broker.clone(),
            pg: state.background_pg.clone(),
        },
        state.keys.clone(),
        Arc::new(seckill::voucher::cache::VoucherCache::default()),
        "relay-with-an-empty-cache".into(),
        &state.settings,
        state.metrics.clone(),
    );
    let (conn, ch) = state.broker.open().await.unwrap();
    ch.confirm_select(Default::default()).await.unwrap();
    let published = relay.step(&ch, seckill::outbox::relay::Read::New).await.unwrap();
    assert_eq!(published, 3, "the three orders were published");
    conn.close(200, "done".into()).await.unwrap();
}

/// The relay's acknowledgement (`lua/outbox_ack.lua`) drops exactly what is
/// acknowledged: entries another relay read and has not acknowledged stay (for it,
/// or for the claim after it dies), and so do entries no relay has read yet, which
/// are still delivered.
#[tokio::test]
async fn acknowledging_drops_only_entries_that_every_relay_is_done_with() {
    let ns = Namespace::new().await;
    let redis = test_redis();
    let mut conn = redis.conn().await.unwrap();
    let stream = format!("{}:{{ack}}:outbox", ns.name);
    // No repair ever closed this shard: any epoch may acknowledge.
    let fence = format!("{}:{{ack}}:repair", ns.name);
    let group = seckill::keys::RELAY_GROUP;
    let ack = redis::Script::new(include_str!("../../lua/outbox_ack.lua"));
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&stream)
        .arg(group)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        let id: String = redis::cmd("XADD")
            .arg(&stream)
            .arg("*")
            .arg("o")
            .arg(i)
            .query_async(&mut conn)
            .await
            .unwrap();
        ids.push(id);
    }
    let reader = conn.clone();
    let read = |consumer: &'static str, count: usize| {
        let (mut conn, stream) = (reader.clone(), stream.clone());
        async move {
            let reply: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(group)
                .arg(consumer)
                .arg("COUNT")
                .arg(count)
                .arg("STREAMS")
                .arg(&stream)
                .arg(">")
                .query_async(&mut conn)
                .await
                .unwrap();
            reply
                .keys
                .into_iter()
                .flat_map(|k| k.ids)
                .map(|e| e.id)
                .collect::<Vec<String>>()
        }
    };
    let len = |mut conn: seckill::redis_conn::Conn, stream: String| async move {
        let n: i64 = redis::cmd("XLEN").arg(&stream).query_async(&mut conn).await.unwrap();
        n
    };
    let a = read("relay-a", 2).await;
    let b = read("relay-b", 2).await;
    assert_eq!((a.as_slice(), b.as_slice()), (&ids[0..2], &ids[2..4]));

    // b is done with its two: they go; a's older ones and the unread one stay.
    let dropped: i64 = ack
        .key(&stream)
        .key(&fence)
        .arg(group)
        .arg(1)
        .arg(&b)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(dropped, 2);
    assert_eq!(len(conn.clone(), stream.clone()).await, 3);

    // a is done too: its two go, the unread fifth stays and is delivered.
    let dropped: i64 = ack
        .key(&stream)
        .key(&fence)
        .arg(group)
        .arg(1)
        .arg(&a)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(dropped, 2);
    assert_eq!(len(conn.clone(), stream.clone()).await, 1);
    assert_eq!(read("relay-a", 10).await, vec![ids[4].clone()]);

    // Read but not acknowledged: it stays, whatever else is acknowledged.
    let dropped: i64 = ack
        .key(&stream)
        .key(&fence)
        .arg(group)
        .arg(1)
        .arg(&a)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(dropped, 0);
    assert_eq!(len(conn.clone(), stream.clone()).await, 1);
    let dropped: i64 = ack
        .key(&stream)
        .key(&fence)
        .arg(group)
        .arg(1)
        .arg(&ids[4..])
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((dropped, len(conn.clone(), stream.clone()).await), (1, 0));
}

/// A relay whose publish was confirmed after a repair closed the shard (the
/// shard's repair fence is newer than the epoch the relay read the entries in) may
/// not acknowledge them: the repair's barrier found them in the outbox, and its
/// rebuild counts them from there. Dropping them would hide them from the rebuild,
/// which would reopen the sale with their units and without their shoppers' marks.
#[tokio::test]
async fn a_relay_of_an_older_epoch_cannot_acknowledge_after_a_repair_closed_the_shard() {
    let ns = Namespace::new().await;
    let redis = test_redis();
    let mut conn = redis.conn().await.unwrap();
    let stream = format!("{}:{{fenced}}:outbox", ns.name);
    let fence = seckill::keys::Keys::new(&ns.name)
        .repair_fence_of_outbox(&stream)
        .unwrap();
    let group = seckill::keys::RELAY_GROUP;
    let ack = redis::Script::new(include_str!("../../lua/outbox_ack.lua"));
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&stream)
        .arg(group)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut conn)
        .await
        .unwrap();
    for i in 0..3 {
        let _: String = redis::cmd("XADD")
            .arg(&stream)
            .arg("*")
            .arg("o")
            .arg(i)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let read: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(group)
        .arg("relay-a")
        .arg("COUNT")
        .arg(10)
        .arg("STREAMS")
        .arg(&stream)
        .arg(">")
        .query_async(&mut conn)
        .await
        .unwrap();
    let ids: Vec<String> = read.keys[0].ids.iter().map(|e| e.id.clone()).collect();
    assert_eq!(ids.len(), 3);
    // A repair of epoch 5 closed the shard; the relay read the entries in epoch 4.
    let _: () = redis::cmd("SET")
        .arg(&fence)
        .arg(5)
        .query_async(&mut conn)
        .await
        .unwrap();
    let refused: i64 = ack
        .key(&stream)
        .key(&fence)
        .arg(group)
        .arg(4)
        .arg(&ids)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(refused, -1, "an acknowledgement of an older epoch is refused");
    let len: i64 = redis::cmd("XLEN").arg(&stream).query_async(&mut conn).await.unwrap();
    assert_eq!(len, 3, "every entry stays for the rebuild");
    // The relay of the repair's epoch (or a later one) acknowledges as usual.
    let dropped: i64 = ack
        .key(&stream)
        .key(&fence)
        .arg(group)
        .arg(5)
        .arg(&ids)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(dropped, 3);
    let _: () = redis::cmd("DEL")
        .arg(&stream)
        .arg(&fence)
        .query_async(&mut conn)
        .await
        .unwrap();
}
