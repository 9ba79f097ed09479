//! A repair touches only what changed (issue 19: "scoped"): on a Redis Cluster a
//! failover of one master, or a master found missing a key, closes only the sales
//! on that master. The other sales keep answering 202 and their orders keep
//! reaching RabbitMQ while the repair waits. Each test holds the repair open with a
//! frozen worker process that holds orders of the repaired sale (the barrier waits
//! for them), so that "while the repair is under way" is a fact the test sees, not
//! a guess about timing.
use crate::fixtures::{signal, spawn_worker_binary, OwnCluster};
use crate::helpers::*;
use reqwest::StatusCode;
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

/// The admin view of the Redis epoch.
async fn redis_state(app: &TestApp) -> serde_json::Value {
    let (status, state) = app.get("/api/v1/admin/redis", Some(&app.admin())).await;
    assert_eq!(status, StatusCode::OK, "{state}");
    state
}

/// Until the admin view shows a repair of exactly `sales` (30 s at most), orders
/// of `other` from new shoppers; then, while it still shows it, `n` more. Returns
/// the statuses of those `n` (the others' are only counted for 500s) and the
/// repair's epoch.
async fn other_sells_during_repair(app: &TestApp, sales: &[i64], other: i64, n: usize) -> (BTreeMap<u16, usize>, i64) {
    let until = Instant::now() + Duration::from_secs(30);
    let mut user = 100_000;
    let epoch = loop {
        let state = redis_state(app).await;
        if state["repairing"] == true && state["repair_sales"] == serde_json::json!(sales) {
            break state["epoch"].as_i64().unwrap();
        }
        assert!(
            Instant::now() < until,
            "a repair of exactly {sales:?} within 30 s: {state}"
        );
        user += 1;
        let (status, body) = app.order(other, user).await;
        assert_ne!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut during = BTreeMap::new();
    for _ in 0..n {
        user += 1;
        let (status, body) = app.order(other, user).await;
        assert_ne!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        *during.entry(status.as_u16()).or_default() += 1;
    }
    let state = redis_state(app).await;
    assert_eq!(
        state["repair_sales"],
        serde_json::json!(sales),
        "still under repair: {state}"
    );
    (during, epoch)
}

/// The repair of `sales` is still under way (the frozen worker holds it open).
async fn still_repairing(app: &TestApp, sales: &[i64]) {
    let state = redis_state(app).await;
    assert_eq!(state["repairing"], true, "{state}");
    assert_eq!(state["repair_sales"], serde_json::json!(sales), "{state}");
}

/// Whether orders of `voucher` are in intents recorded in `epoch` (published
/// during the repair) within 15 s: the relay publishes them a round or a check of
/// its own after they were accepted.
async fn relayed_in(app: &TestApp, ns: &Namespace, epoch: i64, voucher: i64) -> bool {
    eventually(Duration::from_secs(15), || async {
        (relayed_now(app, ns, epoch, voucher).await > 0).then_some(())
    })
    .await
    .is_some()
}

/// Orders of `voucher` in intents recorded in `epoch`.
async fn relayed_now(app: &TestApp, ns: &Namespace, epoch: i64, voucher: i64) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM relay_intents i, unnest(i.voucher_ids) AS v(id)
          WHERE i.namespace = $1 AND i.epoch = $2 AND v.id = $3",
    )
    .bind(ns.keys().namespace())
    .bind(epoch)
    .bind(voucher)
    .fetch_one(app.pg())
    .await
    .unwrap()
}

/// The repaired sale after the worker is back: sells again, sells no earlier buyer
/// twice, takes exactly the rest; every acknowledged order stored once, nothing
/// failed, no number twice, Postgres stock 0, the audit balanced.
async fn repaired_sale_sells_the_rest(app: &TestApp, v: i64, stock: i64, bought: &HashSet<i64>, scenario: &str) {
    assert_eq!(
        selling_again(app, v, 1).await.0,
        StatusCode::CONFLICT,
        "shopper 1 bought before"
    );
    let buyers = bought.len() as i64;
    let twice = accepted(&wave(app, v, 1..=buyers).await);
    assert!(twice.is_empty(), "{scenario}: shoppers sold twice: {twice:?}");
    let rest = accepted(&wave(app, v, 10_000..10_000 + 2 * stock).await);
    assert_eq!(rest.len() as i64, stock - buyers, "{scenario}: exactly the rest");
    let all: HashSet<i64> = bought.iter().chain(rest.values()).copied().collect();
    wait_stored(app, v, stock, Duration::from_secs(30), scenario).await;
    let rows: Vec<(i64, String, Option<String>)> =
        sqlx::query_as("SELECT id, status, order_no FROM voucher_orders WHERE voucher_id = $1")
            .bind(v)
            .fetch_all(app.pg())
            .await
            .unwrap();
    assert_eq!(
        rows.iter().map(|r| r.0).collect::<HashSet<_>>(),
        all,
        "{scenario}: the acknowledged orders"
    );
    assert!(
        rows.iter().all(|r| r.1 == "created"),
        "{scenario}: nothing failed: {rows:?}"
    );
    let numbers: HashSet<&str> = rows.iter().filter_map(|r| r.2.as_deref()).collect();
    assert_eq!(numbers.len() as i64, stock, "{scenario}: no business number twice");
    let left: i32 = sqlx::query_scalar("SELECT stock FROM seckill_vouchers WHERE voucher_id = $1")
        .bind(v)
        .fetch_one(app.pg())
        .await
        .unwrap();
    assert_eq!(left, 0, "{scenario}: persisted + remaining = stock");
    assert_balanced(app, v).await;
}

/// The sale that kept selling: every order it acknowledged is stored, none failed,
/// its books balance.
async fn other_sale_whole(app: &TestApp, v: i64, scenario: &str) {
    let accepted: i64 = app.stats(v).await["orders_accepted"].as_i64().unwrap_or(-1);
    wait_stored(app, v, accepted, Duration::from_secs(30), scenario).await;
    let failed: i64 =
        sqlx::query_scalar("SELECT count(*) FROM voucher_orders WHERE voucher_id = $1 AND status <> 'created'")
            .bind(v)
            .fetch_one(app.pg())
            .await
            .unwrap();
    assert_eq!(failed, 0, "{scenario}: nothing of the other sale failed");
    assert_balanced(app, v).await;
}

/// Waits until every replica of `master` is linked to it and holds all it wrote:
/// a replica still in its first sync cannot be promoted.
fn replicas_caught_up(cluster: &OwnCluster, master: u16) {
    let field = |port: u16, name: &str| {
        let info = cluster.on_node(port, &["INFO", "replication"]);
        info.lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned()))
            .unwrap_or_default()
    };
    let replicas = cluster.replicas_of(master);
    assert!(!replicas.is_empty(), "the master has a replica");
    let ok = crate::fixtures::wait_until(Duration::from_secs(20), || {
        let offset: i64 = field(master, "master_repl_offset:").parse().unwrap_or(i64::MAX);
        replicas.iter().all(|r| {
            field(*r, "master_link_status:") == "up"
                && field(*r, "slave_repl_offset:")
                    .parse::<i64>()
                    .is_ok_and(|o| o >= offset)
        })
    });
    assert!(ok, "the replicas of {master} caught up");
}

/// Sells `users` of `v`, each accepted; their order ids.
async fn sold(app: &TestApp, v: i64, users: std::ops::RangeInclusive<i64>) -> HashSet<i64> {
    let n = users.clone().count();
    let ids: HashSet<i64> = accepted(&wave(app, v, users).await).into_values().collect();
    assert_eq!(ids.len(), n, "every shopper of the wave accepted");
    ids
}

/// A cluster of the test's own, the app on it (no worker of its own) and a frozen
/// worker process holding the first 10 orders of `target` (a sale of 300 on
/// `master`); `on_master`: every sale on that master; `other`: a sale on another.
struct OnCluster {
    ns: Namespace,
    app: TestApp,
    cluster: OwnCluster,
    worker: std::process::Child,
    target: i64,
    master: u16,
    on_master: Vec<i64>,
    other: i64,
    bought: HashSet<i64>,
}

impl Drop for OnCluster {
    fn drop(&mut self) {
        let _ = self.worker.kill();
        let _ = self.worker.wait();
    }
}

async fn on_cluster() -> OnCluster {
    on_cluster_avoiding(None).await
}

/// [`on_cluster`], with the target sale on a master that does not hold `avoid`'s
/// slot (`avoid` names a key of the namespace).
async fn on_cluster_avoiding(avoid: Option<fn(&seckill::keys::Keys) -> String>) -> OnCluster {
    let ns = Namespace::new().await;
    let cluster = tokio::task::spawn_blocking(OwnCluster::start).await.unwrap();
    cluster.on_every_node(&["CONFIG", "SET", "cluster-require-full-coverage", "no"]);
    let env = [
        ("REDIS_URL", cluster.urls()),
        ("SECKILL_REDIS_CLUSTER", "true".to_owned()),
        ("SECKILL_TIME_ZONE", "UTC".to_owned()),
    ];
    let mut app = TestApp::builder(&ns).worker(false);
    for (k, v) in &env {
        app = app.env(k, v.clone());
    }
    let app = app.spawn().await;
    // Whichever master holds the counters and the epoch marker: after a failover
    // the repair's new epoch gives counters again, for every sale.
    let keys = ns.keys();
    let avoided = avoid.map(|k| cluster.master_of(&k(&keys)).unwrap());
    let mut target = app.flash_sale(300).await;
    while avoided == cluster.master_of(&keys.stock(target)) {
        target = app.flash_sale(300).await;
    }
    let master = cluster.master_of(&keys.stock(target)).unwrap();
    // Every sale on that master is under repair, and only those.
    let (mut on_master, mut other) = (vec![target], None);
    for _ in 0..60 {
        let v = app.flash_sale(300).await;
        if cluster.master_of(&keys.stock(v)).unwrap() != master {
            other = Some(v);
            break;
        }
        on_master.push(v);
    }
    let other = other.unwrap();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let worker = spawn_worker_binary(&ns, &env).await;
    signal(&worker, "STOP");
    let bought = sold(&app, target, 1..=10).await;
    sold(&app, other, 1..=10).await;
    wait_relayed(&app, ns.keys().outbox(target)).await;
    tokio::task::block_in_place(|| replicas_caught_up(&cluster, master));
    OnCluster {
        ns,
        app,
        cluster,
        worker,
        target,
        master,
        on_master,
        other,
        bought,
    }
}

/// After the fault: the repair of exactly `on_master` is under way; `other`
/// answers 202 throughout it and its orders are published during it; the target
/// sale is closed. Then the worker is back, the target sells exactly its rest,
/// the other sale's books balance.
async fn only_the_masters_sales_close(s: &OnCluster, since: Instant, scenario: &str) {
    let (app, ns) = (&s.app, &s.ns);
    let (during, epoch) = other_sells_during_repair(app, &s.on_master, s.other, 20).await;
    let (status, body) = app.order(s.target, 501).await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{scenario}: the target sale is closed: {body}"
    );
    println!(
        "{scenario}: repair of {:?} seen {} ms after the fault; the other sale during it {during:?}",
        s.on_master,
        since.elapsed().as_millis()
    );
    assert_eq!(
        during,
        BTreeMap::from([(202, 20)]),
        "{scenario}: the other master's sale sold throughout"
    );
    assert!(
        relayed_in(app, ns, epoch, s.other).await,
        "{scenario}: its orders were published during the repair"
    );
    still_repairing(app, &s.on_master).await;
    signal(&s.worker, "CONT");
    repaired_sale_sells_the_rest(app, s.target, 300, &s.bought, scenario).await;
    println!("{scenario}: the target sale closed {} ms", since.elapsed().as_millis());
    other_sale_whole(app, s.other, scenario).await;
}

mod repairs;
