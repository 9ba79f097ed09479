//! replication: `several_sales_at_once_each_sell_exactly_their_stock`,
//! `orders_are_acknowledged_only_once_a_replica_holds_them`,
//! `a_cluster_acknowledges_orders_only_once_the_masters_replica_holds_them`,
//! `on_a_cluster_a_crowd_buys_exactly_the_stock_with_replicated_acknowledgements`.
use super::*;

/// Six sales sold at once, 40 shoppers each at stock 25: every sale sells exactly
/// its stock, each shopper once, and every accepted order reaches Postgres. On a
/// cluster the sales' keys live in several slots (and masters), so the relay reads
/// their outboxes slot by slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn several_sales_at_once_each_sell_exactly_their_stock() {
    let ns = Namespace::new().await;
    let app = Arc::new(TestApp::spawn(&ns).await);
    let mut sales = Vec::new();
    for _ in 0..6 {
        sales.push(app.flash_sale(25).await);
    }
    if cluster_seeds().is_some() {
        let slots: HashSet<u16> = sales
            .iter()
            .map(|v| seckill::keys::slot(ns.keys().outbox(*v).as_bytes()))
            .collect();
        assert!(slots.len() > 1, "the sales share one slot: the test proves nothing");
    }
    let results = join_all(
        sales
            .iter()
            .flat_map(|&v| (0..40).map(move |u| (v, 10_000 + u)))
            .map(|(v, user)| {
                let app = app.clone();
                tokio::spawn(async move { (v, user, app.order(v, user).await) })
            }),
    )
    .await;
    for &v in &sales {
        let accepted: Vec<i64> = results
            .iter()
            .map(|r| r.as_ref().unwrap())
            .filter(|(sale, _, (status, _))| *sale == v && *status == StatusCode::ACCEPTED)
            .map(|(_, user, _)| *user)
            .collect();
        // (Each shopper sends one request per sale: none can get two 202s here.)
        assert_eq!(accepted.len(), 25, "sale {v} sells exactly its stock");
    }
    for r in &results {
        let (_, _, (status, body)) = r.as_ref().unwrap();
        assert!(
            *status == StatusCode::ACCEPTED || (*status == StatusCode::CONFLICT && code(body) == "sold_out"),
            "{status} {body}"
        );
    }
    for &v in &sales {
        let persisted = eventually(Duration::from_secs(30), || async {
            (app.stats(v).await["orders_persisted"] == 25).then_some(())
        })
        .await;
        assert!(persisted.is_some(), "every accepted order of sale {v} persisted");
        assert_balanced(&app, v).await;
    }
    assert_no_incidents("several sales at once", &[&app.addr]).await;
}

/// `SECKILL_REDIS_WAIT_REPLICAS=1` on a master and replica of the test's own. While
/// the replica answers, orders are acknowledged. While it is stopped, no order can
/// be: at first (the master still counts it in sync) each gets 503 with
/// Retry-After, yet its reservation is on the master, so the shopper finds the
/// order with `…/orders/mine`, a retry answers `already_ordered`, and the order
/// reaches Postgres like any other; once the master reports the replica behind
/// (`INFO replication`, lag past 2 s) and the replica watch has read it, orders are
/// refused before they reserve: 503, no order, the stock unmoved. Once the replica
/// is back, orders are acknowledged again.
#[tokio::test]
async fn orders_are_acknowledged_only_once_a_replica_holds_them() {
    let ns = Namespace::new().await;
    let master = OwnRedis::snapshots_only();
    let replica = OwnRedis::replica_of(&master);
    let app = TestApp::builder(&ns)
        .env("REDIS_URL", master.url())
        .env("SECKILL_REDIS_WAIT_REPLICAS", "1")
        .env("SECKILL_REDIS_WAIT_TIMEOUT_MS", "2000")
        .env("SECKILL_REPLICA_CHECK_MS", "100")
        .spawn()
        .await;
    let v = app.flash_sale(20_000).await;
    assert_eq!(app.order(v, 1).await.0, StatusCode::ACCEPTED, "the replica holds it");

    // The replica stops under a stream of shoppers: requests waiting for it and
    // acknowledged orders on their way to Postgres meet it. The stream ends
    // before the probes (its requests answer 503 once their wait runs out).
    let stream = Steady::start(&app.addr, &app.jwt, app.pg(), v, 50_000, 4, Duration::from_millis(2));
    stream.lands().await;
    signal(replica.process(), "STOP");
    let streamed: Vec<i64> = stream.stop().await.iter().filter_map(|a| a.id).collect();
    let held = refused_before_reserving(&app, v, 100).await;
    signal(replica.process(), "CONT");

    // A new shopper each try: one answered 503 while the replica caught up may
    // have its order all the same.
    let mut tried = 0;
    let back = eventually(Duration::from_secs(10), || {
        tried += 1;
        let user = 1_000 + tried;
        let app = &app;
        async move { (app.order(v, user).await.0 == StatusCode::ACCEPTED).then_some(()) }
    })
    .await;
    assert!(back.is_some(), "acknowledged again once the replica is back");
    // Everything Redis admitted (503s that reserved included) reaches Postgres.
    let expected = 2 + held.len() as i64 + streamed.len() as i64;
    let persisted = eventually(Duration::from_secs(20), || async {
        let stats = app.stats(v).await;
        let (accepted, persisted) = (stats["orders_accepted"].as_i64()?, stats["orders_persisted"].as_i64()?);
        (persisted >= expected && persisted == accepted).then_some(())
    })
    .await;
    assert!(
        persisted.is_some(),
        "the unacknowledged orders are persisted all the same: {}",
        app.stats(v).await
    );
    assert_persisted("a replica stopped", app.pg(), v, &streamed).await;
    assert_balanced(&app, v).await;
}

/// `SECKILL_REDIS_WAIT_REPLICAS=1` on a cluster of the test's own (a replica per
/// master): while the replica of the sale's master is stopped, an order is not
/// acknowledged (503, Retry-After), yet its reservation is on the master: the
/// shopper finds it, a retry answers `already_ordered`, and it reaches Postgres.
/// Once the replica is back, orders are acknowledged again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_acknowledges_orders_only_once_the_masters_replica_holds_them() {
    let ns = Namespace::new().await;
    let cluster = tokio::task::spawn_blocking(OwnCluster::start).await.unwrap();
    let app = TestApp::builder(&ns)
        .env("REDIS_URL", cluster.urls())
        .env("SECKILL_REDIS_CLUSTER", "true")
        .env("SECKILL_REDIS_WAIT_REPLICAS", "1")
        .env("SECKILL_REDIS_WAIT_TIMEOUT_MS", "2000")
        .spawn()
        .await;
    let v = app.flash_sale(20_000).await;
    // A new shopper each try: on a loaded machine a replica can miss the 2 s (503,
    // the order reserved all the same).
    let mut tried = 0;
    let acknowledged = eventually(Duration::from_secs(10), || {
        tried += 1;
        let (app, user) = (&app, 100 + tried);
        async move { (app.order(v, user).await.0 == StatusCode::ACCEPTED).then_some(()) }
    })
    .await;
    assert!(acknowledged.is_some(), "acknowledged while the replica holds it");
    let master = cluster.master_of(&ns.keys().stock(v)).expect("the sale's master");
    let replicas = cluster.replicas_of(master);
    assert_eq!(replicas.len(), 1, "one replica of {master}: {replicas:?}");
    // As on one node: a stream of shoppers meets the stop, and ends before the probe.
    let stream = Steady::start(&app.addr, &app.jwt, app.pg(), v, 50_000, 4, Duration::from_millis(2));
    stream.lands().await;
    cluster.signal(replicas[0], "STOP");
    let streamed: Vec<i64> = stream.stop().await.iter().filter_map(|a| a.id).collect();
    let held = refused_before_reserving(&app, v, 1_000).await;
    cluster.signal(replicas[0], "CONT");
    let mut tried = 0;
    let back = eventually(Duration::from_secs(10), || {
        tried += 1;
        let (app, user) = (&app, 200 + tried);
        async move { (app.order(v, user).await.0 == StatusCode::ACCEPTED).then_some(()) }
    })
    .await;
    assert!(back.is_some(), "acknowledged again once the replica is back");
    // Everything Redis admitted (503s that reserved included) reaches Postgres.
    assert_balanced(&app, v).await;
    for user in held {
        let persisted = eventually(Duration::from_secs(20), || async {
            let n: i64 =
                sqlx::query_scalar("SELECT count(*) FROM voucher_orders WHERE voucher_id = $1 AND user_id = $2")
                    .bind(v)
                    .bind(user)
                    .fetch_one(app.pg())
                    .await
                    .ok()?;
            (n == 1).then_some(())
        })
        .await;
        assert!(
            persisted.is_some(),
            "the unacknowledged order of {user} is persisted all the same"
        );
    }
    assert_persisted("a cluster replica stopped", app.pg(), v, &streamed).await;
}

/// On a cluster (a replica per master) with `SECKILL_REDIS_WAIT_REPLICAS=1`, ids,
/// numbers and orders all wait for their replica, and a crowd buys exactly the
/// stock. Cluster only (the test command's cluster pass runs it); without a
/// cluster it fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Redis Cluster: TEST_REDIS_CLUSTER=$(scripts/redis_cluster.sh --urls) (the test command's cluster pass)"]
async fn on_a_cluster_a_crowd_buys_exactly_the_stock_with_replicated_acknowledgements() {
    require_cluster().await;
    let ns = Namespace::new().await;
    let app = Arc::new(
        TestApp::builder(&ns)
            .env("SECKILL_REDIS_WAIT_REPLICAS", "1")
            .env("SECKILL_REDIS_WAIT_TIMEOUT_MS", "5000")
            .env("SECKILL_DEPENDENCY_TIMEOUT_MS", "15000")
            .spawn()
            .await,
    );
    let v = app.flash_sale(50).await;
    let results = join_all((0..300).map(|i| {
        let app = app.clone();
        tokio::spawn(async move { (100 + i % 120, app.order(v, 100 + i % 120).await) })
    }))
    .await;
    let mut accepted = Vec::new();
    for r in results {
        let (user, (status, body)) = r.unwrap();
        match status {
            StatusCode::ACCEPTED => accepted.push(user),
            StatusCode::CONFLICT => assert!(["sold_out", "already_ordered"].contains(&code(&body)), "{body}"),
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(accepted.len(), 50, "exactly the stock");
    assert_eq!(accepted.iter().collect::<HashSet<_>>().len(), 50, "no shopper twice");
    let persisted = eventually(Duration::from_secs(30), || async {
        (app.stats(v).await["orders_persisted"] == 50).then_some(())
    })
    .await;
    assert!(persisted.is_some());
    assert_balanced(&app, v).await;
    assert_no_incidents("replicated acknowledgements on a cluster", &[&app.addr]).await;
}
