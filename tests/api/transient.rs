//! Redis states that pass answer 503 `unavailable` with `Retry-After`, never 500:
//! a master demoted to a replica (`READONLY`, `MASTERDOWN`), and a master of a
//! Redis Cluster killed mid-crowd (`CLUSTERDOWN`, `MOVED`, refused connections
//! during the failover). Each on servers of the test's own.
use crate::faults::crowd::{after_the_fault, crowd, settle};
use crate::fixtures::{free_port, OwnCluster, OwnRedis};
use crate::helpers::*;
use reqwest::StatusCode;
use std::sync::Arc;
use std::time::Duration;

/// An order's raw answer: status, `Retry-After`, error code.
async fn order_answer(app: &TestApp, voucher: i64, user: i64) -> (StatusCode, Option<String>, String) {
    let resp = app
        .client
        .post(format!("{}/api/v1/vouchers/{voucher}/orders", app.addr))
        .bearer_auth(app.shopper(user))
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .map(|h| h.to_str().unwrap().to_owned());
    let body: serde_json::Value = resp.json().await.unwrap_or_default();
    (status, retry_after, code(&body).to_owned())
}

/// The only node turned into a replica (`REPLICAOF` a master that does not answer,
/// so it keeps its data and refuses writes with `READONLY`; then, not serving stale
/// data, every command with `MASTERDOWN`) while a crowd orders: redis-rs hands these
/// back as reply values, not connection errors, and every order used to answer 500
/// for as long as it lasted. Now each answers 503 `unavailable` with `Retry-After`;
/// once the node is a master again the sale sells on, and every acknowledged order
/// is persisted with the books balanced.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_master_turned_replica_answers_503_until_it_is_a_master_again() {
    let ns = Namespace::new().await;
    let redis = OwnRedis::aof_always();
    let app = Arc::new(TestApp::builder(&ns).env("REDIS_URL", redis.url()).spawn().await);
    let stock = 300;
    let v = app.flash_sale(stock).await;
    let (app_ref, redis_ref) = (&app, &redis);
    let tally = crowd(&app.addr, &app.jwt, app.pg(), v, 1..401, |landing| async move {
        let (app, redis) = (app_ref, redis_ref);
        let nobody = free_port().to_string();
        landing.lands().await;
        assert_eq!(redis.cli(&["REPLICAOF", "127.0.0.1", &nobody]).as_deref(), Some("OK"));
        let mut user = 10_000;
        for phase in ["READONLY", "MASTERDOWN"] {
            if phase == "MASTERDOWN" {
                let set = redis.cli(&["CONFIG", "SET", "replica-serve-stale-data", "no"]);
                assert_eq!(set.as_deref(), Some("OK"));
            }
            // Several in a row: the first may meet the refusal on the open
            // connection, the next ones on a new connection to a server that is
            // not a master.
            for _ in 0..5 {
                user += 1;
                let (status, retry_after, code) = order_answer(app, v, user).await;
                assert_eq!(
                    (status, code.as_str()),
                    (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
                    "{phase}: an order on a replica"
                );
                assert!(retry_after.is_some(), "{phase}: 503 without Retry-After");
            }
        }
        assert_eq!(redis.cli(&["REPLICAOF", "NO", "ONE"]).as_deref(), Some("OK"));
    })
    .await;
    let scenario = "a master turned replica";
    let all = after_the_fault(scenario, &app.addr, &app.jwt, app.pg(), v, tally).await;
    settle(scenario, &app, v, stock, &all).await;
}

/// The handle itself: a write refused with `READONLY` (a reply value in redis-rs,
/// not a connection error) drops the connection, and a new one to a server that is
/// not a master is refused, until it is a master again; so nothing keeps writing
/// through, or reading from, a demoted master's connection.
#[tokio::test]
async fn a_connection_to_a_demoted_master_is_dropped_and_not_made_again() {
    let redis = OwnRedis::snapshots_only();
    let handle = seckill::redis_conn::Redis::new(&redis.url(), false, Duration::from_secs(5)).unwrap();
    let mut conn = handle.conn().await.expect("a master: connected");
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("1")
        .query_async(&mut conn)
        .await
        .unwrap();
    let nobody = free_port().to_string();
    assert_eq!(redis.cli(&["REPLICAOF", "127.0.0.1", &nobody]).as_deref(), Some("OK"));
    let refused: redis::RedisResult<()> = redis::cmd("SET").arg("k").arg("2").query_async(&mut conn).await;
    let e = refused.expect_err("a replica refuses writes");
    assert!(seckill::redis_conn::is_transient(&e), "{e}");
    // In a transaction the refusal comes back as EXECABORT with the READONLY
    // inside (a sharded sale's snapshot is one): transient all the same.
    let mut raw = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let aborted: redis::RedisResult<()> = redis::pipe().atomic().set("k", 2).query_async(&mut raw).await;
    let e = aborted.expect_err("a replica refuses the transaction");
    assert!(seckill::redis_conn::is_transient(&e), "{e:?}");
    let again = handle.conn().await.err().expect("no connection to a replica");
    assert!(seckill::redis_conn::is_transient(&again), "{again}");
    assert_eq!(redis.cli(&["REPLICAOF", "NO", "ONE"]).as_deref(), Some("OK"));
    let mut conn = handle.conn().await.expect("a master again: connected");
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("3")
        .query_async(&mut conn)
        .await
        .unwrap();
}

/// The scenario: a master of a cluster of the test's own (two replicas per
/// master, so that `WAIT 1` can be met after the failover) killed -9 while a crowd
/// orders from a sale sharded over six slots (its shards on every master). Every
/// answer is counted: 503s while the slots move and the sale is repaired, never a
/// 500; nothing acknowledged lost, no shopper twice, the books balanced.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_master_killed_mid_crowd_answers_503_never_500() {
    let ns = Namespace::new().await;
    let cluster = tokio::task::spawn_blocking(|| OwnCluster::with_replicas(2))
        .await
        .unwrap();
    let app = Arc::new(
        TestApp::builder(&ns)
            .env("REDIS_URL", cluster.urls())
            .env("SECKILL_REDIS_CLUSTER", "true")
            .env("SECKILL_REDIS_WAIT_REPLICAS", "1")
            .env("SECKILL_REDIS_WAIT_TIMEOUT_MS", "5000")
            .spawn()
            .await,
    );
    // More than the crowd's first quarter (300): the sale still sells when the
    // master dies; less than the 1,600 shoppers can buy while every sale answers
    // 503 from the kill until the failover's repair (about half of them), so that
    // the whole stock sells.
    let stock = 400;
    let v = app.sharded_sale(stock, 6).await;
    let master = cluster
        .master_of(&ns.keys().stock_at(v, 0, 6))
        .expect("a master serves shard 0");
    // The shards the killed master serves.
    let killed: Vec<u32> = (0..6)
        .filter(|&k| cluster.master_of(&ns.keys().stock_at(v, k, 6)) == Some(master))
        .collect();
    let cluster_ref = &cluster;
    let tally = crowd(&app.addr, &app.jwt, app.pg(), v, 1..1201, |landing| async move {
        landing.lands().await;
        cluster_ref.kill(master);
    })
    .await;
    // Until a replica serves the killed master's slots (the node timeout, 2 s,
    // then an election): the shards there answer 503 meanwhile, and afterwards
    // too while the promoted master has no replica for `WAIT 1`; their units move
    // to the other shards, which sell them.
    let shard0 = ns.keys().stock_at(v, 0, 6);
    let promoted = eventually(Duration::from_secs(30), || async {
        cluster.master_of(&shard0).filter(|now| *now != master)
    })
    .await;
    assert!(promoted.is_some(), "the replica took the slots over within 30 s");
    // The killed master's shards were closed: their shoppers in the fault's crowd
    // (the half sent after it landed, before the slots moved) got 503s.
    for k in &killed {
        let closed = tally
            .answers
            .iter()
            .filter(|(u, s)| *s == 503 && seckill::keys::shard_of(*u, 6) == *k)
            .count();
        println!("cluster master killed: its shard {k} answered {closed} 503s");
        assert!(closed > 0, "shard {k} of the killed master answered no 503");
    }
    // The shoppers after the fault buy the rest once the sale is repaired (the
    // whole stock must sell).
    let all = after_the_fault(
        "cluster master killed, sharded sale",
        &app.addr,
        &app.jwt,
        app.pg(),
        v,
        tally,
    )
    .await;
    let statuses = all.statuses.clone();
    println!("cluster master killed mid-crowd, answers by status: {statuses:?}");
    settle("cluster master killed, sharded sale", &app, v, stock, &all).await;
    assert_eq!(statuses.get(&500), None, "no 500 during a failover: {statuses:?}");
    assert!(
        statuses.keys().all(|s| [202, 409, 503].contains(s)),
        "only 202, 409 and 503: {statuses:?}"
    );
    assert!(!all.acknowledged.is_empty());
}
