//! One slot's trouble is its own: on a Redis Cluster the relay reads and
//! acknowledges the outboxes slot by slot, and a slot whose read fails does not
//! stop the other slots' orders from reaching Postgres.
use crate::faults::crowd::{assert_persisted, Steady};
use crate::fixtures::OwnCluster;
use crate::helpers::*;
use reqwest::StatusCode;
use std::time::Duration;

/// Two sales whose outboxes live in different slots of a cluster of the test's
/// own; one sale's outbox is broken (a string where the stream was: every read and
/// claim of it fails). The other sale's orders are relayed and persisted all the
/// same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_slot_does_not_stop_the_other_sales_orders() {
    let ns = Namespace::new().await;
    let cluster = tokio::task::spawn_blocking(OwnCluster::start).await.unwrap();
    let app = TestApp::builder(&ns)
        .env("REDIS_URL", cluster.urls())
        .env("SECKILL_REDIS_CLUSTER", "true")
        .spawn()
        .await;
    let keys = ns.keys();
    let broken = app.flash_sale(10).await;
    let mut healthy = app.flash_sale(10).await;
    while keys::slot(&keys.outbox(healthy)) == keys::slot(&keys.outbox(broken)) {
        healthy = app.flash_sale(10).await;
    }
    assert_eq!(selling_again(&app, broken, 1).await.0, StatusCode::ACCEPTED);
    eventually(Duration::from_secs(20), || async {
        (app.stats(broken).await["orders_persisted"] == 1).then_some(())
    })
    .await
    .expect("the first sale's order persisted");

    let mut redis = app.redis().await;
    let _: () = redis::pipe()
        .cmd("DEL")
        .arg(keys.outbox(broken))
        .ignore()
        .cmd("SET")
        .arg(keys.outbox(broken))
        .arg("not a stream")
        .ignore()
        .query_async(&mut redis)
        .await
        .unwrap();
    for user in 1..=5 {
        let (status, body) = app.order(healthy, user).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    let persisted = eventually(Duration::from_secs(20), || async {
        (app.stats(healthy).await["orders_persisted"] == 5).then_some(())
    })
    .await;
    assert!(
        persisted.is_some(),
        "the healthy sale's orders persisted while another slot's outbox fails"
    );
}

mod keys {
    pub fn slot(key: &str) -> u16 {
        seckill::keys::slot(key.as_bytes())
    }
}

/// A cluster of the test's own that serves the slots of the masters that answer
/// (`cluster-require-full-coverage no`), and the app on it.
async fn cluster_app(ns: &Namespace, http_workers: &str, wait_replicas: &str) -> (OwnCluster, TestApp) {
    cluster_app_forcing(ns, http_workers, wait_replicas, &[]).await
}

/// [`cluster_app`], its instance forcing incidents of `kinds`.
async fn cluster_app_forcing(
    ns: &Namespace,
    http_workers: &str,
    wait_replicas: &str,
    kinds: &'static [&'static str],
) -> (OwnCluster, TestApp) {
    let cluster = tokio::task::spawn_blocking(OwnCluster::start).await.unwrap();
    cluster.on_every_node(&["CONFIG", "SET", "cluster-require-full-coverage", "no"]);
    let app = TestApp::builder(ns)
        .forces_incidents(kinds)
        .env("REDIS_URL", cluster.urls())
        .env("SECKILL_REDIS_CLUSTER", "true")
        .env("SECKILL_TIME_ZONE", "UTC")
        .env("SECKILL_HTTP_WORKERS", http_workers)
        .env("SECKILL_REDIS_WAIT_REPLICAS", wait_replicas)
        .spawn()
        .await;
    (cluster, app)
}

/// Two sales of 20,000 (more than the test loops can sell in their seconds), each sold once and persisted: one on a master that holds
/// neither the order-id nor the order-number counter (the one to stop: its sale,
/// its master), one on another master.
async fn two_sales(app: &TestApp, cluster: &OwnCluster, keys: &seckill::keys::Keys) -> ((i64, u16), i64) {
    let now = chrono::Utc::now();
    let counters = [
        format!("{{order_id:{}}}", now.timestamp().div_euclid(86_400)),
        format!("{{seq:order:0:{}}}", now.format("%Y%m%d")),
    ];
    let busy: Vec<u16> = counters.iter().map(|k| cluster.master_of(k).unwrap()).collect();
    let (mut stopped, mut healthy) = (None, None);
    for _ in 0..60 {
        let v = app.flash_sale(20_000).await;
        let m = cluster.master_of(&keys.stock(v)).unwrap();
        match (stopped, healthy) {
            (None, _) if !busy.contains(&m) => stopped = Some((v, m)),
            (Some((_, s)), None) if m != s => healthy = Some(v),
            _ => {}
        }
        if stopped.is_some() && healthy.is_some() {
            break;
        }
    }
    let (stopped, healthy) = (stopped.unwrap(), healthy.unwrap());
    for v in [stopped.0, healthy] {
        assert_eq!(selling_again(app, v, 1).await.0, StatusCode::ACCEPTED);
        persisted(app, v, 1).await.expect("the first order persisted");
    }
    (stopped, healthy)
}

/// One master of a cluster of the test's own stops answering (SIGSTOP, its replica
/// too, so that no failover replaces it). A sale whose keys live on another master
/// (the order-id and order-number counters too) keeps answering 202 throughout,
/// even on a connection made while the master is stopped, and its orders reach
/// Postgres; the stopped master's sale answers 503. Once the master answers again,
/// its sale sells on and both sales' books balance. This used to stop every sale:
/// a new connection, the relay's included, could not read the masters' identity
/// without that master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_that_does_not_answer_stops_only_its_own_sales() {
    let ns = Namespace::new().await;
    // One order-path connection: an order on the stopped master's sale breaks it,
    // and the next order, on the other sale, must make a new one.
    let (cluster, app) = cluster_app(&ns, "1", "0").await;
    let ((stopped, master), healthy) = two_sales(&app, &cluster, &ns.keys()).await;

    let replicas = cluster.replicas_of(master);
    // The master stops under a stream of shoppers of its sale: requests and
    // acknowledged orders on their way to Postgres meet it. The stream ends
    // before the probes (its requests to the stopped master answer 503 once their
    // Redis calls time out), so that each probe meets the broken connection alone.
    let stream = stream_of(&app, stopped);
    stream.lands().await;
    for port in std::iter::once(master).chain(replicas.iter().copied()) {
        cluster.signal(port, "STOP");
    }
    let streamed: Vec<i64> = stream.stop().await.iter().filter_map(|a| a.id).collect();
    let mut statuses = std::collections::BTreeMap::<(i64, u16), usize>::new();
    let (mut user, mut sold) = (100, 1);
    // Past the cluster's node timeout (2 s), which marks the master failed.
    let until = std::time::Instant::now() + Duration::from_secs(8);
    while std::time::Instant::now() < until {
        user += 1;
        let (status, body) = app.order(stopped, user).await;
        *statuses.entry((stopped, status.as_u16())).or_default() += 1;
        assert_eq!(
            status,
            StatusCode::SERVICE_UNAVAILABLE,
            "the stopped master's sale: {body}"
        );
        user += 1;
        let (status, body) = app.order(healthy, user).await;
        *statuses.entry((healthy, status.as_u16())).or_default() += 1;
        assert_eq!(status, StatusCode::ACCEPTED, "a sale on another master: {body}");
        sold += 1;
    }
    let relayed = persisted(&app, healthy, sold).await;
    println!("one master stopped: answers by (sale, status): {statuses:?}");
    for port in std::iter::once(master).chain(replicas.iter().copied()) {
        cluster.signal(port, "CONT");
    }
    assert!(
        relayed.is_some(),
        "the other sale's orders persisted while the master was stopped"
    );

    let (status, body) = selling_again(&app, stopped, 99_999).await;
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "the master answers again: its sale sells: {body}"
    );
    // A minute: the master wakes with whatever the service sent it meanwhile
    // queued, and an entry a stale read took reaches the relay by its claim. An
    // order answered 503 while the master slept may have been queued there and run
    // when it woke: every order it accepted is persisted, two at least.
    let woke = eventually(Duration::from_secs(60), || async {
        let stats = app.stats(stopped).await;
        let (accepted, persisted) = (stats["orders_accepted"].as_i64()?, stats["orders_persisted"].as_i64()?);
        (persisted >= 2 && persisted == accepted).then_some(())
    })
    .await;
    if woke.is_none() {
        let outbox = ns.keys().outbox(stopped);
        let mut conn = app.redis().await;
        let (len, pending): (i64, redis::Value) = redis::pipe()
            .cmd("XLEN")
            .arg(&outbox)
            .cmd("XPENDING")
            .arg(&outbox)
            .arg(seckill::keys::RELAY_GROUP)
            .query_async(&mut conn)
            .await
            .unwrap();
        panic!(
            "its orders persisted: stats {}, outbox length {len}, pending {pending:?}, relayed {}, persisted {}",
            app.stats(stopped).await,
            app.metric("seckill_relay_published_orders_total").await,
            app.metric("seckill_orders_persisted_total{result=\"created\"}").await,
        );
    }
    assert_persisted("one master stopped", app.pg(), stopped, &streamed).await;
    assert_balanced(&app, stopped).await;
    assert_balanced(&app, healthy).await;
}

/// The safety side: a master stops answering (its replica too), then its replica
/// alone comes back and is promoted (`CLUSTER FAILOVER FORCE`: a failover while
/// the old master is silent). The promoted replica is another server, which may
/// have missed writes: each shard's sequence says whether it did (a repair) or not
/// (none); either way every sale sells on, books balanced, while the old master
/// still does not answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_while_a_master_does_not_answer_is_noticed() {
    let ns = Namespace::new().await;
    // Orders the promoted replica missed are admitted again from the memory of this
    // process, which acknowledged them: each an incident.
    let (cluster, app) = cluster_app_forcing(&ns, "0", "0", &["rescued_order"]).await;
    let ((stopped, master), healthy) = two_sales(&app, &cluster, &ns.keys()).await;
    let replica = cluster.replicas_of(master)[0];
    let repairs = repairs_of(&app, stopped).await;
    let stream = stream_of(&app, stopped);
    stream.lands().await;
    cluster.signal(master, "STOP");
    cluster.signal(replica, "STOP");
    let streamed: Vec<i64> = stream.stop().await.iter().filter_map(|a| a.id).collect();
    // Until the cluster has marked the master failed (node timeout 2 s); the
    // other sale sells meanwhile.
    let mut user = 100;
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < until {
        user += 1;
        let (status, body) = app.order(healthy, user).await;
        assert_eq!(status, StatusCode::ACCEPTED, "a sale on another master: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.signal(replica, "CONT");
    // Promoted at once (it would wait for its master otherwise, having been
    // stopped as long as it).
    assert_eq!(cluster.on_node(replica, &["CLUSTER", "FAILOVER", "FORCE"]), "OK");
    let (status, body) = selling_again(&app, stopped, 99_999).await;
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "the promoted replica's sale sells after the repair: {body}"
    );
    let (status, body) = selling_again(&app, healthy, 99_998).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    cluster.signal(master, "CONT");
    // Acknowledged without waiting for a replica (`SECKILL_REDIS_WAIT_REPLICAS=0`),
    // an order the promoted replica missed went with the old master, and the
    // shard's history says so (a repair); this process, which acknowledged it,
    // still holds it and admits it again. Every acknowledged order persisted.
    let repaired = repairs_of(&app, stopped).await > repairs;
    let rescued = app
        .metric("seckill_worker_incidents_total{kind=\"rescued_order\"}")
        .await;
    println!("a failover while a master is silent: repaired {repaired}, admitted again from memory {rescued}");
    assert_persisted("a failover while a master is silent", app.pg(), stopped, &streamed).await;
    assert_balanced(&app, stopped).await;
    assert_balanced(&app, healthy).await;
}

/// New shoppers of `voucher` ordering in four lanes, for a fault to land on.
fn stream_of(app: &TestApp, voucher: i64) -> Steady {
    Steady::start(
        &app.addr,
        &app.jwt,
        app.pg(),
        voucher,
        50_000,
        4,
        Duration::from_millis(2),
    )
}

/// Until `n` orders of `voucher` are persisted (30 s at most).
async fn persisted(app: &TestApp, voucher: i64, n: i64) -> Option<()> {
    eventually(Duration::from_secs(30), || async {
        (app.stats(voucher).await["orders_persisted"] == n).then_some(())
    })
    .await
}
