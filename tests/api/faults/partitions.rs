//! A process cut off by the network (a blackhole
//! route in a namespace of its own, [`NetNs`]) from one dependency, then healed,
//! while both ends of the cut live on:
//! - `a_serve_cut_off_from_postgres_then_from_redis_then_healed_loses_nothing`;
//! - `a_worker_cut_off_from_postgres_mid_batch_then_healed_loses_nothing`;
//! - `a_relay_cut_off_from_rabbitmq_while_publishing_then_healed_loses_nothing`.
use super::*;
use crate::fixtures::{spawn_serve_in, spawn_worker_binary, spawn_worker_in, NetNs, Reaped};
use crowd::Landing;

/// The addresses, inside the namespace, of the dependencies (`NetNs::cut` them).
const POSTGRES: u8 = 10;
const REDIS: u8 = 11;
const RABBITMQ: u8 = 12;

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

/// The test's in-process instance (API, relay and worker) on the machine, a
/// namespace whose processes reach Postgres, Redis and RabbitMQ each at an
/// address of its own, and the settings for processes inside it and outside.
struct Partitioned {
    ns: Namespace,
    app: TestApp,
    net: Arc<NetNs>,
    /// Settings of a process inside the namespace.
    inside: Vec<(&'static str, String)>,
    /// Settings of a process outside (one Redis node, as inside).
    outside: Vec<(&'static str, String)>,
}

impl Partitioned {
    /// `relay`: whether the in-process instance runs a relay too.
    async fn new(relay: bool) -> Self {
        let ns = Namespace::new().await;
        // One Redis node: a cluster's nodes announce 127.0.0.1 addresses, which
        // inside the namespace are its own.
        let redis = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
        let app = TestApp::builder(&ns)
            .env("REDIS_URL", redis.clone())
            .env("SECKILL_REDIS_CLUSTER", "false")
            .relay(relay)
            .spawn()
            .await;
        let mut net = NetNs::new(&ns.name);
        let mut inside = vec![("SECKILL_REDIS_CLUSTER", "false".to_owned())];
        for (var, url, host) in [
            ("DATABASE_URL", ns.vars["DATABASE_URL"].clone(), POSTGRES),
            ("REDIS_URL", redis.clone(), REDIS),
            ("AMQP_URL", ns.vars["AMQP_URL"].clone(), RABBITMQ),
        ] {
            let (port, _) = moved(&url, "");
            let at = net.expose(host, port).await;
            inside.push((var, moved(&url, &at).1));
        }
        let outside = vec![("REDIS_URL", redis), ("SECKILL_REDIS_CLUSTER", "false".to_owned())];
        Self {
            ns,
            app,
            net: Arc::new(net),
            inside,
            outside,
        }
    }

    fn vars<'a>(v: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
        v.iter().map(|(k, v)| (*k, v.as_str())).collect()
    }

    /// A `serve` inside the namespace, two `seckill worker` processes outside, a
    /// sale of 250 units in 4 shards that the serve inside has sold from (its
    /// first order); then a crowd at the serve inside, with `fault` landing on
    /// it, the drain and the checks of [`settle`]. Returns the serve's base URL,
    /// the sale, the answers, and the processes (stopped when dropped).
    async fn crowd_at_a_serve_inside<F, Fut>(&self, scenario: &str, fault: F) -> (String, i64, Tally, Reaped)
    where
        F: FnOnce(Landing, Arc<NetNs>) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let (serve, base) = spawn_serve_in(&self.ns, &self.net, &Self::vars(&self.inside)).await;
        let outside = Self::vars(&self.outside);
        let children = Reaped(vec![
            serve,
            spawn_worker_binary(&self.ns, &outside).await,
            spawn_worker_binary(&self.ns, &outside).await,
        ]);
        let stock = 250;
        let v = self.app.sharded_sale(stock, 4).await;
        let first = first_order(&self.app, &base, v).await;
        let net = self.net.clone();
        let tally = crowd(&base, &self.app.jwt, self.app.pg(), v, 1..301, |landing| {
            fault(landing, net)
        })
        .await;
        let mut all = after_the_fault(scenario, &base, &self.app.jwt, self.app.pg(), v, tally).await;
        all.acknowledged.insert(first);
        all.ids.push(first);
        settle(scenario, &self.app, v, stock, &all).await;
        (base, v, all, children)
    }
}

/// Orders at `base` until one is taken (the process knows the sale); its id.
async fn first_order(app: &TestApp, base: &str, v: i64) -> i64 {
    let client = reqwest::Client::new();
    let probe = app.shopper(88_888);
    eventually(Duration::from_secs(10), || async {
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
    .expect("the process in the namespace sells")
}

/// Fault 3. A `serve` in the namespace takes a crowd, beside the in-process
/// instance and two `seckill worker` processes; it is cut off from Postgres for
/// 3 s (its relay cannot record an intent: the orders wait in the outbox, or the
/// other relay takes them), then from Redis for 3 s (it answers 503: an order
/// may have been taken whose answer was lost), then healed. Every acknowledged
/// order is stored once, no id twice, the stock sold exactly, no incident, no
/// 500, and no sale was closed (a cut-off process does not make a shard look
/// gone back).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "makes a network namespace and veth pair: needs root (scripts/test.sh runs it as root)"]
async fn a_serve_cut_off_from_postgres_then_from_redis_then_healed_loses_nothing() {
    require_root();
    let p = Partitioned::new(true).await;
    let scenario = "serve partitioned";
    let (_, v, all, _children) = p
        .crowd_at_a_serve_inside(scenario, |landing, net| async move {
            landing.lands().await;
            net.cut(POSTGRES);
            tokio::time::sleep(Duration::from_secs(3)).await;
            net.heal(POSTGRES);
            net.cut(REDIS);
            let cut = landing.now().await;
            tokio::time::sleep(Duration::from_secs(3)).await;
            net.heal(REDIS);
            println!("fault serve cut off from postgres, then redis, healed; at the redis cut {cut:?}");
        })
        .await;
    // 503s from the process while it is cut off from Redis, but no sale closed.
    assert_eq!(
        closure(scenario, &p.app, v, &all).await,
        0.0,
        "{scenario}: a sale was closed"
    );
    p.app.shutdown().await;
}

/// Fault 4. A `seckill worker` in the namespace and one outside share the
/// orders with the in-process instance's worker; while orders are on their way,
/// the one inside is cut off from Postgres for 3 s (a batch it was writing
/// stalls, or its commit's answer is lost), then healed: it finishes or retries
/// what it held, idempotently.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "makes a network namespace and veth pair: needs root (scripts/test.sh runs it as root)"]
async fn a_worker_cut_off_from_postgres_mid_batch_then_healed_loses_nothing() {
    require_root();
    let p = Partitioned::new(true).await;
    let _children = Reaped(vec![
        spawn_worker_in(&p.ns, &p.net, &Partitioned::vars(&p.inside)).await,
        spawn_worker_binary(&p.ns, &Partitioned::vars(&p.outside)).await,
    ]);
    let stock = 250;
    let v = p.app.sharded_sale(stock, 4).await;
    let tally = crowd(&p.app.addr, &p.app.jwt, p.app.pg(), v, 1..301, |landing| {
        let net = p.net.clone();
        async move {
            landing.lands().await;
            net.cut(POSTGRES);
            tokio::time::sleep(Duration::from_secs(3)).await;
            net.heal(POSTGRES);
        }
    })
    .await;
    let scenario = "worker partitioned from postgres";
    let all = after_the_fault(scenario, &p.app.addr, &p.app.jwt, p.app.pg(), v, tally).await;
    settle(scenario, &p.app, v, stock, &all).await;
    never_closed(scenario, &p.app, v, &all).await;
    p.app.shutdown().await;
}

/// Fault 5. A `serve` in the namespace takes a crowd, its relay the only one;
/// while it publishes (orders acknowledged and not yet in Postgres), it is cut
/// off from RabbitMQ for 7 s, longer than its confirm timeout: publications
/// whose confirms never came are published again once it is healed, and the
/// workers store each order once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "makes a network namespace and veth pair: needs root (scripts/test.sh runs it as root)"]
async fn a_relay_cut_off_from_rabbitmq_while_publishing_then_healed_loses_nothing() {
    require_root();
    let p = Partitioned::new(false).await;
    let scenario = "relay partitioned from rabbitmq";
    let (base, v, all, _children) = p
        .crowd_at_a_serve_inside(scenario, |landing, net| async move {
            landing.lands().await;
            net.cut(RABBITMQ);
            // Longer than the relay's confirm timeout (5 s).
            tokio::time::sleep(Duration::from_secs(7)).await;
            net.heal(RABBITMQ);
        })
        .await;
    never_closed(scenario, &p.app, v, &all).await;
    // The cut hit publications: the relay inside saw confirms fail (not come in
    // time, or its channel break), and published those orders again.
    let metrics = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let failed: f64 = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("seckill_relay_confirms_total{result=\"error\"} "))
        .map(|v| v.trim().parse::<f64>().unwrap())
        .sum();
    println!("fault {scenario}: publications without a confirm inside: {failed}");
    assert!(
        failed > 0.0,
        "{scenario}: the cut hit no publication awaiting its confirm"
    );
    p.app.shutdown().await;
}
