//! A durable counter losing its keys twice while one instance's call is on its way.
//!
//! The counter restarts a lost key from Postgres. If the instance that reads
//! Postgres is slow to reach Redis (a stalled connection, a busy machine), another
//! instance can restart the key, issue values, and Redis can lose the key again in
//! between. The slow call must still hand out only values nobody else was given.
use crate::helpers::*;
use seckill::redis_conn::{Redis, Verified};
use seckill::sequence::counter::{DurableCounter, Range};
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A TCP proxy in front of a Redis server that can hold what clients send: while
/// held, requests wait in the proxy (counted in `held`) and replies still flow.
struct HoldingProxy {
    port: u16,
    hold: watch::Sender<bool>,
    held: Arc<AtomicUsize>,
}

impl HoldingProxy {
    async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (hold, _) = watch::channel(false);
        let held = Arc::new(AtomicUsize::new(0));
        let (hold_rx, held_in) = (hold.subscribe(), held.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(&upstream).await.unwrap();
                let (mut client_r, mut client_w) = client.into_split();
                let (mut server_r, mut server_w) = server.into_split();
                let (mut hold_rx, held) = (hold_rx.clone(), held_in.clone());
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match client_r.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if *hold_rx.borrow_and_update() {
                            held.fetch_add(1, Ordering::SeqCst);
                            while *hold_rx.borrow_and_update() {
                                if hold_rx.changed().await.is_err() {
                                    return;
                                }
                            }
                        }
                        if server_w.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_r, &mut client_w).await;
                });
            }
        });
        Self { port, hold, held }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

/// The standalone Redis node's `host:port` (this test proxies one node, also in
/// the cluster pass).
fn node() -> (String, String) {
    let url = std::env::var("REDIS_URL")
        .ok()
        .filter(|u| !u.trim().is_empty() && !u.contains(','))
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned());
    let rest = url.trim_start_matches("redis://");
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let host_port = rest.split('/').next().unwrap().to_owned();
    (url, host_port)
}

/// Instance B reads Postgres after a loss, then its call to Redis stalls; instance
/// A restarts the key and issues values; Redis loses the key again; B's call
/// arrives. Every value either instance was given is distinct.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_restart_after_a_second_loss_reissues_nothing() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let pg = app.app().state().background_pg.clone();
    let (node_url, host_port) = node();
    let epoch = 1;
    let direct = Redis::new(&node_url, false, Duration::from_secs(5)).unwrap();
    let run_id = direct.conn().await.unwrap().run_id().clone();
    direct.identity().set(Some(Verified::settled(run_id.clone(), epoch)));
    let proxy = HoldingProxy::start(host_port).await;
    let slow = Redis::new(&proxy.url(), false, Duration::from_secs(60)).unwrap();
    slow.identity().set(Some(Verified::settled(run_id, epoch)));
    let a = DurableCounter::new(direct.clone(), pg.clone(), ns.keys());
    let b = Arc::new(DurableCounter::new(slow, pg.clone(), ns.keys()));
    let scope = "late-restart";
    let (value_key, ceiling_key) = ns.keys().counter(scope, epoch);
    let lose = || {
        let direct = direct.clone();
        let (value_key, ceiling_key) = (value_key.clone(), ceiling_key.clone());
        async move {
            let mut conn = direct.conn().await.unwrap();
            let gone: i64 = redis::cmd("DEL")
                .arg(&value_key)
                .arg(&ceiling_key)
                .query_async(&mut conn)
                .await
                .unwrap();
            assert_eq!(gone, 2, "both keys were there to lose");
        }
    };
    let mut values: Vec<u64> = Vec::new();
    let mut keep = |r: Range| values.extend(r.first..=r.last);
    keep(a.take(scope, 5, 600, 10).await.unwrap());
    keep(b.take(scope, 5, 600, 10).await.unwrap());

    // First loss. B finds the key gone and goes to Postgres, where a lock holds it.
    lose().await;
    let mut lock = pg.begin().await.unwrap();
    sqlx::query("SELECT high FROM counter_watermarks WHERE scope = $1 FOR UPDATE")
        .bind(scope)
        .fetch_one(&mut *lock)
        .await
        .unwrap();
    let late = tokio::spawn({
        let b = b.clone();
        async move { b.take(scope, 5, 600, 10).await }
    });
    until_a_statement_waits_for_a_lock(&pg, "%counter_watermarks%").await;
    // B's next request to Redis (the restart) will wait in the proxy.
    proxy.hold.send_replace(true);
    lock.commit().await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while proxy.held.load(Ordering::SeqCst) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "B's restart never reached the proxy"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(!late.is_finished());

    // Meanwhile A restarts the key and issues values; then Redis loses it again.
    keep(a.take(scope, 5, 600, 10).await.unwrap());
    lose().await;
    // B's restart arrives now.
    proxy.hold.send_replace(false);
    keep(late.await.unwrap().unwrap());
    // And both go on from whatever the key holds.
    for _ in 0..3 {
        keep(a.take(scope, 5, 600, 10).await.unwrap());
        keep(b.take(scope, 5, 600, 10).await.unwrap());
    }
    assert_eq!(values.len(), 50);
    let distinct: HashSet<u64> = values.iter().copied().collect();
    assert_eq!(distinct.len(), values.len(), "a value handed out twice: {values:?}");
    app.shutdown().await;
}

/// Redis losing only one of a counter's two keys (an eviction, say), the value key
/// or the ceiling key, with two instances taking values: none is handed out twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn losing_one_of_the_two_keys_reissues_nothing() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let pg = app.app().state().background_pg.clone();
    let (node_url, _) = node();
    let epoch = 1;
    let redis = Redis::new(&node_url, false, Duration::from_secs(5)).unwrap();
    let run_id = redis.conn().await.unwrap().run_id().clone();
    redis.identity().set(Some(Verified::settled(run_id, epoch)));
    let a = DurableCounter::new(redis.clone(), pg.clone(), ns.keys());
    let b = DurableCounter::new(redis.clone(), pg.clone(), ns.keys());
    let scope = "one-key-lost";
    let (value_key, ceiling_key) = ns.keys().counter(scope, epoch);
    let mut values: Vec<u64> = Vec::new();
    for (round, lost) in [&ceiling_key, &value_key, &ceiling_key, &value_key]
        .into_iter()
        .enumerate()
    {
        for _ in 0..3 {
            let (x, y) = tokio::join!(a.take(scope, 4, 600, 10), b.take(scope, 4, 600, 10));
            for r in [x.unwrap(), y.unwrap()] {
                values.extend(r.first..=r.last);
            }
        }
        let mut conn = redis.conn().await.unwrap();
        let gone: i64 = redis::cmd("DEL").arg(lost).query_async(&mut conn).await.unwrap();
        assert_eq!(gone, 1, "round {round}: the key was there to lose");
    }
    // And after the last loss.
    for _ in 0..3 {
        let r = a.take(scope, 4, 600, 10).await.unwrap();
        values.extend(r.first..=r.last);
    }
    assert_eq!(values.len(), 4 * 6 * 4 + 12);
    let distinct: HashSet<u64> = values.iter().copied().collect();
    assert_eq!(distinct.len(), values.len(), "a value handed out twice: {values:?}");
    app.shutdown().await;
}
