//! pipeline: `postgres_unavailable_then_back_loses_nothing`,
//! `order_ids_stay_unique_after_the_counter_key_is_deleted`,
//! `the_relay_finds_outboxes_without_the_voucher_cache`,
//! `acknowledging_drops_only_entries_that_every_relay_is_done_with`.
use super::*;

/// Postgres refuses connections for a while: the worker backs off holding the
/// messages it received, orders go on being accepted, and the relay publishes none
/// of them (it publishes only what it recorded in Postgres as published, see
/// `ordering::outbox::relay::intent`): they wait in the outbox. Once Postgres is back every
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

/// Ids never repeat across instances, nor across an instance replaced by a new
/// one (its blocks in hand are dropped with it), whatever Redis holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn order_ids_stay_unique_across_instances_and_restarts() {
    let ns = Namespace::new().await;
    let small_blocks = || TestApp::builder(&ns).env("SECKILL_ID_BLOCK", "7").mode(Mode::Serve);
    let a = Arc::new(small_blocks().spawn().await);
    let mut b = Arc::new(small_blocks().spawn().await);
    let draw = |app: Arc<TestApp>, n: usize| async move {
        let ids = app.app().state().handles.ids.clone();
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
        // And every Redis key of the namespace gone: ids do not live there.
        let keys = all_keys(&ns.vars["REDIS_URL"], &format!("{}:*", ns.name)).await;
        if !keys.is_empty() {
            let mut redis = a.redis().await;
            for k in keys {
                let _: () = redis::cmd("DEL").arg(k).query_async(&mut redis).await.unwrap();
            }
        }
        b = Arc::new(small_blocks().spawn().await);
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
    let relay = seckill::ordering::outbox::relay::Relay::new(
        seckill::ordering::outbox::relay::Ends {
            redis: state.handles.redis.clone(),
            broker: state.handles.broker.clone(),
            pg: state.handles.background_pg.clone(),
            recovery: state.recovery.clone(),
        },
        state.handles.keys.clone(),
        Arc::new(seckill::sales::cache::VoucherCache::default()),
        "relay-with-an-empty-cache".into(),
        &state.settings,
        state.metrics.clone(),
    );
    let (conn, ch) = state.handles.broker.open().await.unwrap();
    ch.confirm_select(Default::default()).await.unwrap();
    let published = relay
        .step(&ch, seckill::ordering::outbox::relay::Read::New)
        .await
        .unwrap();
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
    let group = seckill::keys::RELAY_GROUP;
    let ack = redis::Script::new(include_str!("../../../lua/outbox_ack.lua"));
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
        .arg(group)
        .arg(&b)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(dropped, 2);
    assert_eq!(len(conn.clone(), stream.clone()).await, 3);

    // a is done too: its two go, the unread fifth stays and is delivered.
    let dropped: i64 = ack
        .key(&stream)
        .arg(group)
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
        .arg(group)
        .arg(&a)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(dropped, 0);
    assert_eq!(len(conn.clone(), stream.clone()).await, 1);
    let dropped: i64 = ack
        .key(&stream)
        .arg(group)
        .arg(&ids[4..])
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((dropped, len(conn.clone(), stream.clone()).await), (1, 0));
}
