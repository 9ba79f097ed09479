//! Issue 40, fault 3: a `serve` process cut off by the network (a blackhole
//! route in its own namespace) from Postgres only, then from Redis only, then
//! healed, while both ends of each cut live on.
use super::*;
use crate::fixtures::{spawn_serve_in, spawn_worker_binary, NetNs};

/// The port of a `127.0.0.1:<port>` URL, and the URL with `addr` in its place.
fn moved(url: &str, addr: &str) -> (u16, String) {
    let rest = url
        .split("127.0.0.1:")
        .nth(1)
        .unwrap_or_else(|| panic!("this test forwards servers on 127.0.0.1: {url}"));
    let port: u16 = rest
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap();
    (port, url.replacen("127.0.0.1", addr, 1))
}

/// A `serve` in a network namespace of its own takes a crowd, beside the test's
/// in-process instance and two `seckill worker` processes; it is cut off from
/// Postgres for 3 s (its relay cannot record an intent: the orders wait in the
/// outbox, or the other relay takes them), then from Redis for 3 s (it answers
/// 503: an order may have been taken whose answer was lost), then healed. Every
/// acknowledged order is stored once, no id twice, the stock sold exactly, no
/// incident, no 500, and no sale was closed (a cut-off process does not make a
/// shard look gone back).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "makes a network namespace and veth pair: needs root (scripts/test.sh runs it as root)"]
async fn a_serve_cut_off_from_postgres_then_from_redis_then_healed_loses_nothing() {
    require_root();
    let ns = Namespace::new().await;
    // One Redis node: a cluster's nodes announce 127.0.0.1 addresses, which
    // inside the namespace are its own.
    let redis = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let single = [("REDIS_URL", redis.as_str()), ("SECKILL_REDIS_CLUSTER", "false")];
    let app = TestApp::builder(&ns)
        .env("REDIS_URL", redis.clone())
        .env("SECKILL_REDIS_CLUSTER", "false")
        .spawn()
        .await;
    let mut net = NetNs::new(&ns.name);
    let (pg_port, _) = moved(&ns.vars["DATABASE_URL"], "");
    let (redis_port, _) = moved(&redis, "");
    let (amqp_port, _) = moved(&ns.vars["AMQP_URL"], "");
    let (pg_at, redis_at) = (net.expose(10, pg_port).await, net.expose(11, redis_port).await);
    let amqp_at = net.expose(12, amqp_port).await;
    let (_, database_url) = moved(&ns.vars["DATABASE_URL"], &pg_at);
    let (_, redis_url) = moved(&redis, &redis_at);
    let (_, amqp_url) = moved(&ns.vars["AMQP_URL"], &amqp_at);
    let inside = [
        ("DATABASE_URL", database_url.as_str()),
        ("REDIS_URL", redis_url.as_str()),
        ("SECKILL_REDIS_CLUSTER", "false"),
        ("AMQP_URL", amqp_url.as_str()),
    ];
    let (mut serve, base) = spawn_serve_in(&ns, &net, &inside).await;
    let mut workers = [
        spawn_worker_binary(&ns, &single).await,
        spawn_worker_binary(&ns, &single).await,
    ];
    let stock = 250;
    let v = app.sharded_sale(stock, 4).await;
    // The process in the namespace knows the sale before the crowd comes.
    let client = reqwest::Client::new();
    let probe = app.shopper(88_888);
    let first = eventually(Duration::from_secs(10), || async {
        let resp = client
            .post(format!("{base}/api/v1/vouchers/{v}/orders"))
            .bearer_auth(&probe)
            .send()
            .await
            .ok()?;
        let body: serde_json::Value = resp.json().await.ok()?;
        body["order_id"].as_str()?.parse::<i64>().ok()
    })
    .await
    .expect("the process in the namespace sells");
    let net = Arc::new(net);
    let tally = crowd(&base, &app.jwt, app.pg(), v, 1..301, |landing| {
        let net = net.clone();
        async move {
            landing.lands().await;
            net.cut(10);
            tokio::time::sleep(Duration::from_secs(3)).await;
            net.heal(10);
            net.cut(11);
            let cut = landing.now().await;
            tokio::time::sleep(Duration::from_secs(3)).await;
            net.heal(11);
            println!("fault serve cut off from postgres, then redis, healed; at the redis cut {cut:?}");
        }
    })
    .await;
    let mut all = after_the_fault("serve partitioned", &base, &app.jwt, app.pg(), v, tally).await;
    all.acknowledged.insert(first);
    all.ids.push(first);
    settle("serve partitioned", &app, v, stock, &all).await;
    let errors = all.statuses.iter().filter(|(s, _)| **s >= 500 && **s != 503).count();
    let closed = app
        .metric(&format!("seckill_sale_closed_seconds{{voucher=\"{v}\"}}"))
        .await;
    println!(
        "fault serve partitioned: answers {:?} (503: the cut-off process); sale closed {closed:.1} s",
        all.statuses
    );
    assert_eq!(errors, 0, "no 5xx but 503: {:?}", all.statuses);
    assert_eq!(closed, 0.0, "no sale was closed");
    for child in workers.iter_mut().chain([&mut serve]) {
        let _ = child.kill();
        let _ = child.wait();
    }
    app.shutdown().await;
}
