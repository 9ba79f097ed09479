//! A Redis Cluster master cut off by the network from its
//! replicas and the other masters (the minority side of a partition), while the
//! service still reaches it, with `WAIT 1`; then healed.
use super::*;
use crate::fixtures::{spawn_serve_binary, spawn_worker_binary, MinorityCluster, Reaped};

/// Two `serve` processes (the test's in-process instance, whose worker also
/// runs, and one more) and two `seckill worker` processes on a cluster of 3
/// masters with two replicas each, a sale in 8 shards, a crowd. The master
/// holding some of its shards is cut off from every other node: what it takes
/// now no replica confirms (503), the majority fails it over to a replica
/// after the node timeout, and once healed it rejoins as a replica, dropping
/// what it took alone. Every acknowledged order is stored once, no id twice,
/// the stock sold exactly, no incident, no 500; how long the sale was closed
/// is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "makes a network namespace and veth pair: needs root (scripts/test.sh runs it as root)"]
async fn a_redis_master_on_the_minority_side_of_a_partition_loses_nothing_with_wait_1() {
    require_root();
    let ns = Namespace::new().await;
    let cluster = {
        let tag = ns.name.clone();
        Arc::new(
            tokio::task::spawn_blocking(move || MinorityCluster::start(&tag))
                .await
                .unwrap(),
        )
    };
    let urls = cluster.urls();
    let env = [
        ("REDIS_URL", urls.as_str()),
        ("SECKILL_REDIS_CLUSTER", "true"),
        ("SECKILL_REDIS_WAIT_REPLICAS", "1"),
        // Invariants, not latency: a loaded machine's replicas may take longer
        // than the default 200 ms to confirm.
        ("SECKILL_REDIS_WAIT_TIMEOUT_MS", "2000"),
    ];
    let mut builder = TestApp::builder(&ns);
    for (k, v) in env {
        builder = builder.env(k, v);
    }
    let app = builder.spawn().await;
    let (serve, _) = spawn_serve_binary(&ns, &env).await;
    let _children = Reaped(vec![
        serve,
        spawn_worker_binary(&ns, &env).await,
        spawn_worker_binary(&ns, &env).await,
    ]);
    let stock = 250;
    let v = app.sharded_sale(stock, 8).await;
    let held = {
        let cluster = cluster.clone();
        tokio::task::spawn_blocking(move || cluster.minority_keys())
            .await
            .unwrap()
    };
    assert!(held > 0, "the master to cut off holds some of the sale's shards");
    // The fresh cluster's replicas in sync first: until then orders are refused
    // before they reserve, and the fault would land on no order in flight. (This
    // instance's replica watch; the other `serve` reads every 250 ms.)
    let watch = app.app().state().ordering.placer.replication.watch.clone();
    let shards: Vec<String> = (0..8).map(|k| ns.keys().stock_at(v, k, 8)).collect();
    eventually(Duration::from_secs(60), || async {
        shards.iter().all(|k| watch.in_sync(k) >= 1).then_some(())
    })
    .await
    .expect("every master's replicas in sync within 60 s");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let failover = Arc::new(std::sync::Mutex::new(Duration::ZERO));
    let tally = crowd(&app.addr, &app.jwt, app.pg(), v, 1..301, |landing| {
        let (cluster, failover) = (cluster.clone(), failover.clone());
        async move {
            landing.lands().await;
            let cut = std::time::Instant::now();
            cluster.isolate();
            let failed_over = eventually(Duration::from_secs(30), || {
                let cluster = cluster.clone();
                async move {
                    tokio::task::spawn_blocking(move || cluster.failed_over().then_some(()))
                        .await
                        .unwrap()
                }
            })
            .await;
            *failover.lock().unwrap() = cut.elapsed();
            assert!(
                failed_over.is_some(),
                "the majority failed the cut-off master over: {}",
                cluster.majority_view()
            );
            cluster.heal();
        }
    })
    .await;
    let rejoined = eventually(Duration::from_secs(30), || {
        let cluster = cluster.clone();
        async move {
            tokio::task::spawn_blocking(move || (cluster.whole() && cluster.minority_role() == "slave").then_some(()))
                .await
                .unwrap()
        }
    })
    .await;
    assert!(rejoined.is_some(), "the old master rejoined as a replica");
    let scenario = "redis master on the minority side";
    let all = after_the_fault(scenario, &app.addr, &app.jwt, app.pg(), v, tally).await;
    settle(scenario, &app, v, stock, &all).await;
    println!(
        "fault {scenario}: failed over {:.1} s after the cut",
        failover.lock().unwrap().as_secs_f64()
    );
    closure(scenario, &app, v, &all).await;
    app.shutdown().await;
}
