//! Issue 3: nothing acknowledged is lost between Redis and Postgres, whatever fails.
use crate::helpers::*;
use lapin::options::{BasicGetOptions, BasicPublishOptions};
use lapin::BasicProperties;
use reqwest::StatusCode;
use seckill::app::{Mode, Options};
use seckill::broker::{Broker, ORDERS_ROUTING_KEY};
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

fn broker(ns: &Namespace) -> Broker {
    Broker::new(
        "amqp://guest:guest@127.0.0.1:5672/%2f",
        ns.keys(),
        Duration::from_secs(5),
        5,
    )
}

/// The API dies right after the Lua, before anything was published: the orders
/// are in the outbox, and a relay that runs later delivers every one.
#[tokio::test]
async fn orders_accepted_by_a_process_killed_before_publishing_are_not_lost() {
    let ns = Namespace::new().await;
    let api = TestApp::spawn_api_only(&ns, &[]).await;
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
    let no_relay = Options {
        relay: false,
        ..Default::default()
    };
    let api = TestApp::spawn_with(&ns, &[], no_relay, Mode::All).await;
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

    let app = TestApp::spawn_with(
        &ns,
        &[("SECKILL_RELAY_CLAIM_IDLE_MS", "300")],
        Options::default(),
        Mode::All,
    )
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

async fn publish_raw(ns: &Namespace, body: &[u8]) {
    let b = broker(ns);
    let (conn, ch) = b.open().await.unwrap();
    ch.confirm_select(Default::default()).await.unwrap();
    let confirm = ch
        .basic_publish(
            &ns.keys().orders_exchange(),
            ORDERS_ROUTING_KEY,
            BasicPublishOptions::default(),
            body,
            BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(confirm.is_ack());
    conn.close(200, "done").await.unwrap();
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
            })
            .collect(),
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
async fn a_poison_message_lands_in_the_dead_letter_queue() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    // Topology exists once the worker is consuming.
    let b = broker(&ns);
    let (conn, ch) = b.open().await.unwrap();
    publish_raw(&ns, b"this is not an order batch").await;
    let dead = eventually(Duration::from_secs(10), || async {
        ch.basic_get(&ns.keys().dead_queue(), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
    })
    .await
    .expect("the poison message is dead-lettered");
    assert_eq!(&dead.delivery.data[..], b"this is not an order batch");
    assert_eq!(app.app().state().metrics.worker_poison.get(), 1);
    conn.close(200, "done").await.unwrap();
    app.shutdown().await;
}

/// Postgres refuses connections for a while: the worker backs off holding its
/// messages, and once Postgres is back every accepted order is persisted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_unavailable_then_back_loses_nothing() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(100).await;
    let admin = sqlx::PgPool::connect("postgres://root@127.0.0.1:5432/postgres")
        .await
        .unwrap();
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
    for user in 1..=40 {
        assert_eq!(
            app.order(v, user).await.0,
            StatusCode::ACCEPTED,
            "the hot path needs no Postgres"
        );
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    sqlx::query(&format!("ALTER DATABASE {} WITH ALLOW_CONNECTIONS true", ns.db))
        .execute(&admin)
        .await
        .unwrap();
    wait_persisted(&app, v, 40).await;
    let all: i64 = sqlx::query_scalar("SELECT count(*) FROM voucher_orders")
        .fetch_one(app.pg())
        .await
        .unwrap();
    assert_eq!(all, 40, "none doubled, none failed");
    admin.close().await;
    app.shutdown().await;
}

/// Ids never repeat across instances, even when Redis loses the counter mid-day.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn order_ids_stay_unique_after_the_counter_key_is_deleted() {
    let ns = Namespace::new().await;
    let small_blocks = [("SECKILL_ID_BLOCK", "7")];
    let a = Arc::new(TestApp::spawn_with(&ns, &small_blocks, Options::default(), Mode::Serve).await);
    let b = Arc::new(TestApp::spawn_with(&ns, &small_blocks, Options::default(), Mode::Serve).await);
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

/// The database's own guard, fed directly: a batch redelivered after the sale sold
/// out is recognised as duplicates (not failures); orders beyond Postgres's stock and
/// a second order of one shopper become `failed`; stock is never negative.
#[tokio::test]
async fn the_database_guard_classifies_duplicates_overstock_and_second_orders() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let state = app.app().state();
    let seq = &state.sequences;
    let (v, w) = (app.flash_sale(3).await, app.flash_sale(5).await);
    let now = chrono::Utc::now().timestamp_millis();
    let msg = |id: i64, user: i64, voucher: i64| OrderMsg {
        id,
        user_id: user,
        voucher_id: voucher,
        created_ms: now + id,
    };
    let persist = |orders: Vec<OrderMsg>| async move {
        seckill::worker::persist::persist(&state.jobs_pg, seq, &orders)
            .await
            .unwrap()
    };

    let first: Vec<OrderMsg> = (1..=3).map(|i| msg(i, 100 + i, v)).collect();
    let o = persist(first.clone()).await;
    assert_eq!((o.created, o.duplicates, o.failed), (3, 0, 0));
    let o = persist(first).await;
    assert_eq!(
        (o.created, o.duplicates, o.failed),
        (0, 3, 0),
        "a redelivery at sold-out is not an incident"
    );
    let o = persist(vec![msg(4, 200, v)]).await;
    assert_eq!(
        (o.created, o.duplicates, o.failed),
        (0, 0, 1),
        "beyond Postgres's stock"
    );
    let o = persist(vec![msg(10, 7, w), msg(11, 7, w), msg(12, 8, w)]).await;
    assert_eq!(
        (o.created, o.duplicates, o.failed),
        (2, 0, 1),
        "one live order per shopper"
    );
    let o = persist(vec![msg(10, 7, w), msg(13, 7, w)]).await;
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
