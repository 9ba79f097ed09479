//! `/health/ready` tells the truth about Redis: the replicas the weakest master
//! has (on a cluster, asked of every master), and a refusal of a Redis that may
//! evict keys. On servers of the test's own.
use crate::fixtures::{OwnCluster, OwnRedis};
use crate::helpers::*;
use reqwest::StatusCode;
use std::time::Duration;

/// An evicting `maxmemory-policy` would drop shoppers' marks and stock silently
/// under memory pressure: readiness answers 503 naming it, and 200 again once
/// the policy is `noeviction`.
#[tokio::test]
async fn readiness_refuses_an_evicting_redis_naming_its_policy() {
    let ns = Namespace::new().await;
    let redis = OwnRedis::aof_always();
    let app = TestApp::builder(&ns).env("REDIS_URL", redis.url()).spawn().await;
    let ready = eventually(Duration::from_secs(20), || async {
        let (status, body) = app.get("/health/ready", None).await;
        (status == StatusCode::OK).then_some(body)
    })
    .await
    .expect("ready");
    assert_eq!(
        ready["checks"]["redis_masters"]["evicting"],
        serde_json::json!([]),
        "{ready}"
    );

    let set = redis.cli(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    assert_eq!(set.as_deref(), Some("OK"));
    // Readiness is checked once a second in the background: the next check says so.
    let (status, body) = eventually(Duration::from_secs(10), || async {
        let (status, body) = app.get("/health/ready", None).await;
        (status == StatusCode::SERVICE_UNAVAILABLE).then_some((status, body))
    })
    .await
    .expect("not ready within 10 s of the policy change");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(code(&body), "unavailable");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("maxmemory-policy allkeys-lru"), "{message}");

    let set = redis.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    assert_eq!(set.as_deref(), Some("OK"));
    let ready_again = eventually(Duration::from_secs(10), || async {
        let (status, _) = app.get("/health/ready", None).await;
        (status == StatusCode::OK).then_some(())
    })
    .await;
    assert!(ready_again.is_some(), "ready again within 10 s of noeviction");
}

/// On a cluster of the test's own (a replica per master) readiness reports one
/// replica, not the 0 of whichever node a keyless INFO reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_reports_the_replicas_of_every_cluster_master() {
    let ns = Namespace::new().await;
    let cluster = tokio::task::spawn_blocking(OwnCluster::start).await.unwrap();
    let app = TestApp::builder(&ns)
        .env("REDIS_URL", cluster.urls())
        .env("SECKILL_REDIS_CLUSTER", "true")
        .spawn()
        .await;
    let body = eventually(Duration::from_secs(30), || async {
        let (status, body) = app.get("/health/ready", None).await;
        (status == StatusCode::OK && body["checks"]["redis_durability"].is_object()).then_some(body)
    })
    .await
    .expect("ready, with the durability read");
    assert_eq!(body["checks"]["redis_masters"]["replicas"], 1, "{body:#}");
    assert_eq!(body["checks"]["redis_durability"]["replicas"], 1, "{body:#}");
}
