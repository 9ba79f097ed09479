//! The fault of [`super::lost_steps`] and [`super::lost_side`]: a master of a
//! cluster of the test's own whose replicas stop reading, behind 32 MB of its
//! replication stream, so that a write it takes next reaches neither replica
//! before it is killed -9 and one of them takes over.
use super::*;
use crate::fixtures::OwnCluster;
use std::future::Future;

/// A cluster of the test's own, `wait + 1` replicas per master, and an instance
/// on it with `SECKILL_REDIS_WAIT_REPLICAS=wait` (a failover leaves the promoted
/// master `wait` replicas).
pub(super) async fn on_a_cluster(ns: &Namespace, wait: u16, env: &[(&str, &str)]) -> (OwnCluster, TestApp) {
    let cluster = tokio::task::spawn_blocking(move || OwnCluster::with_replicas(wait + 1))
        .await
        .unwrap();
    // No replica of another master moves to the doomed one while its own are
    // stopped (it would copy the very write the test keeps from them), and the
    // replicas answer the probes while the cluster is down between the kill and
    // the promotion.
    cluster.on_every_node(&["CONFIG", "SET", "cluster-migration-barrier", "999"]);
    cluster.on_every_node(&["CONFIG", "SET", "cluster-allow-reads-when-down", "yes"]);
    let mut builder = TestApp::builder(ns)
        .env("REDIS_URL", cluster.urls())
        .env("SECKILL_REDIS_CLUSTER", "true")
        .env("SECKILL_REDIS_WAIT_REPLICAS", wait.to_string())
        .env("SECKILL_REDIS_WAIT_TIMEOUT_MS", "1000");
    for (k, v) in env {
        builder = builder.env(k, *v);
    }
    (cluster, builder.spawn().await)
}

/// The master serving `key`, its replicas stopped behind 32 MB of its stream.
pub(super) struct Doomed<'a> {
    cluster: &'a OwnCluster,
    pub master: u16,
    replicas: Vec<u16>,
    key: String,
}

impl<'a> Doomed<'a> {
    /// Once each replica of `key`'s master has had its first sync (one that never
    /// had one cannot take over), stops them and writes 32 MB on the master (more
    /// than the loopback sockets buffer), in `key`'s slot.
    pub(super) async fn stop_replicas(cluster: &'a OwnCluster, key: &str, replicas: usize) -> Self {
        let master = cluster.master_of(key).expect("a master serves the key");
        let ids = cluster.replicas_of(master);
        assert_eq!(ids.len(), replicas, "the replicas of {master}");
        // Online, and holding every write the master took so far.
        let synced = eventually(Duration::from_secs(30), || async {
            let info = cluster.on_node(master, &["INFO", "replication"]);
            let offset = info
                .lines()
                .find_map(|l| l.strip_prefix("master_repl_offset:"))?
                .trim()
                .to_owned();
            let caught_up = info
                .lines()
                .filter(|l| l.starts_with("slave") && l.contains("state=online"))
                .filter(|l| l.split(',').any(|f| f == format!("offset={offset}")))
                .count();
            (caught_up == ids.len()).then_some(())
        })
        .await;
        assert!(synced.is_some(), "the replicas of {master} caught up within 30 s");
        for &r in &ids {
            cluster.signal(r, "STOP");
        }
        let junk = format!("{key}:junk");
        let script = "redis.call('SET', KEYS[1], string.rep('x', 33554432)) return 1";
        assert_eq!(cluster.on_node(master, &["EVAL", script, "1", &junk]), "1");
        Self {
            cluster,
            master,
            replicas: ids,
            key: key.to_owned(),
        }
    }

    /// The fault proves itself: `probe` (of a node's port) is 1 on the master,
    /// which is then killed -9, and 0 on each replica once it has read all the
    /// master sent it (its link is down); then a replica takes the slot over.
    pub(super) async fn kill<F, Fut>(&self, what: &str, probe: F)
    where
        F: Fn(u16) -> Fut,
        Fut: Future<Output = i64>,
    {
        let cluster = self.cluster;
        assert_eq!(probe(self.master).await, 1, "{what} on the master");
        // Still in the master's own output buffers, which the kill loses (not in
        // a socket's, which a replica would read once it runs again).
        let replicas = cluster.on_node(self.master, &["CLIENT", "LIST", "TYPE", "replica"]);
        let held = replicas
            .lines()
            .filter(|l| l.split(' ').any(|f| f.strip_prefix("omem=").is_some_and(|n| n != "0")))
            .count();
        assert_eq!(
            held,
            self.replicas.len(),
            "the write held back from each replica: {replicas}"
        );
        cluster.kill(self.master);
        for &r in &self.replicas {
            cluster.signal(r, "CONT");
        }
        for &r in &self.replicas {
            let down = eventually(Duration::from_secs(10), || async {
                cluster
                    .on_node(r, &["INFO", "replication"])
                    .contains("master_link_status:down")
                    .then_some(())
            })
            .await;
            assert!(down.is_some(), "the replica on {r} saw its master go");
            assert_eq!(probe(r).await, 0, "{what} on no replica (the one on {r})");
        }
        println!("{what}: on the master killed, on neither replica");
        let promoted = eventually(Duration::from_secs(60), || async {
            cluster.master_of(&self.key).filter(|now| *now != self.master)
        })
        .await;
        assert!(
            promoted.is_some_and(|p| self.replicas.contains(&p)),
            "one of the replicas took the slot over within 60 s ({promoted:?}): {}",
            self.replicas
                .iter()
                .map(|&r| cluster.log_tail(r, 400))
                .collect::<Vec<_>>()
                .join("\n---\n")
        );
    }
}

/// A connection to one node that reads as a replica may (`READONLY`).
pub(super) async fn node(port: u16) -> redis::aio::MultiplexedConnection {
    let mut conn = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("READONLY").query_async(&mut conn).await.unwrap();
    conn
}

/// Orders of `shoppers` in rounds until one is answered no 503 (within 60 s): the
/// 202s by shopper. Fails if a shopper gets two orders.
pub(super) async fn sell_all(app: &TestApp, voucher: i64, shoppers: &[i64], what: &str) -> HashMap<i64, i64> {
    let mut sold: HashMap<i64, i64> = HashMap::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let pending: Vec<i64> = shoppers.iter().copied().filter(|u| !sold.contains_key(u)).collect();
        let round = sell_once(app, voucher, &pending).await;
        for (u, id) in round.accepted {
            assert!(sold.insert(u, id).is_none(), "shopper {u} got two orders");
        }
        if round.unavailable == 0 {
            return sold;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: {} answered 503 still after 60 s",
            round.unavailable
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One round: the 202s by shopper, and how many were 503.
struct Round {
    accepted: HashMap<i64, i64>,
    unavailable: usize,
}

async fn sell_once(app: &TestApp, voucher: i64, shoppers: &[i64]) -> Round {
    use futures::StreamExt;
    let answers: Vec<(i64, StatusCode, Value)> = futures::stream::iter(shoppers.iter().map(|&u| async move {
        let (s, b) = app.order(voucher, u).await;
        (u, s, b)
    }))
    .buffer_unordered(64)
    .collect()
    .await;
    let mut round = Round {
        accepted: HashMap::new(),
        unavailable: 0,
    };
    for (u, s, b) in answers {
        match s {
            StatusCode::ACCEPTED => {
                round
                    .accepted
                    .insert(u, b["order_id"].as_str().unwrap().parse().unwrap());
            }
            StatusCode::SERVICE_UNAVAILABLE => round.unavailable += 1,
            _ => assert_eq!(s, StatusCode::CONFLICT, "{b}"),
        }
    }
    round
}
