//! Issue 40, fault 1: the RabbitMQ node leading the orders queue killed with -9
//! mid-sale, on a three-node cluster of the test's own. The relays and workers
//! were given every node (`AMQP_URL` a comma-separated list) and move to a live
//! one; the quorum queue elects a new leader among the other two members.
use super::*;
use crate::fixtures::{spawn_serve_binary, spawn_worker_binary, OwnRabbitCluster, Reaped};

/// Two `serve` processes (the test's in-process instance, whose worker also
/// runs, and one more) and two `seckill worker` processes, a sharded sale, a
/// crowd: the leader of the orders queue dies with -9 while orders are in flight
/// between Redis and Postgres. Every acknowledged order is stored once, no id
/// twice, the stock sold exactly, no incident, no 500, and the sale is never
/// closed (the outbox holds what the broker cannot take yet).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "runs RabbitMQ nodes as the rabbitmq user: needs root (scripts/test.sh runs it as root)"]
async fn the_rabbitmq_node_leading_the_orders_queue_killed_9_loses_nothing() {
    require_root();
    let ns = Namespace::new().await;
    let name = ns.vars["SECKILL_NAMESPACE"].clone();
    let cluster = {
        let name = name.clone();
        tokio::task::spawn_blocking(move || OwnRabbitCluster::start(&name))
            .await
            .unwrap()
    };
    let urls = cluster.urls();
    let app = TestApp::builder(&ns).env("AMQP_URL", urls.clone()).spawn().await;
    let extra = [("AMQP_URL", urls.as_str())];
    let (serve, _) = spawn_serve_binary(&ns, &extra).await;
    let _children = Reaped(vec![
        serve,
        spawn_worker_binary(&ns, &extra).await,
        spawn_worker_binary(&ns, &extra).await,
    ]);
    let queue = format!("{name}.orders");
    assert_eq!(
        cluster.members(&queue),
        [0, 1, 2],
        "the orders queue has a member on each node"
    );
    let stock = 250;
    let v = app.sharded_sale(stock, 4).await;
    let cluster = Arc::new(cluster);
    // Asked before the crowd (rabbitmqctl takes a second or two): members only
    // change leader when one fails.
    let leader = {
        let (cluster, queue) = (cluster.clone(), queue.clone());
        tokio::task::spawn_blocking(move || cluster.leader(&queue))
            .await
            .unwrap()
    }
    .expect("the orders queue has a leader");
    // Declared through the first listed node, where every process connected
    // first (a quorum queue's leader is placed on the declaring node): the kill
    // makes every relay and worker move to another node.
    assert_eq!(leader, 0, "the orders queue is led by the node every process is on");
    let tally = crowd(&app.addr, &app.jwt, app.pg(), v, 1..301, |landing| {
        let cluster = cluster.clone();
        async move {
            landing.lands().await;
            cluster.nodes[leader].kill9();
            let after = landing.now().await;
            println!("fault rabbitmq leader killed: node {} of 3; then {after:?}", leader + 1);
        }
    })
    .await;
    let all = after_the_fault("rabbitmq leader killed", &app.addr, &app.jwt, app.pg(), v, tally).await;
    settle("rabbitmq leader killed", &app, v, stock, &all).await;
    let new_leader = {
        let (cluster, queue) = (cluster.clone(), queue.clone());
        tokio::task::spawn_blocking(move || cluster.leader(&queue))
            .await
            .unwrap()
    };
    assert!(
        new_leader.is_some_and(|l| l != leader),
        "another node leads the orders queue: {new_leader:?}"
    );
    println!(
        "fault rabbitmq leader killed: new leader node {}",
        new_leader.unwrap() + 1
    );
    never_closed("rabbitmq leader killed", &app, v, &all).await;
    app.shutdown().await;
}
