//! Redis Cluster and replicated acknowledgements: several sales at once (their keys
//! in several hash slots), and `SECKILL_REDIS_WAIT_REPLICAS`. These run on one
//! node and, with `TEST_REDIS_CLUSTER` set (the test command does), on the local
//! cluster of `scripts/redis_cluster.sh`.
use crate::helpers::*;
use futures::future::join_all;
use reqwest::StatusCode;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// Six sales sold at once, 40 shoppers each at stock 25: every sale sells exactly
/// its stock, each shopper once, and every accepted order reaches Postgres. On a
/// cluster the sales' keys live in several slots (and masters), so the relay reads
/// their outboxes slot by slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn several_sales_at_once_each_sell_exactly_their_stock() {
    let ns = Namespace::new().await;
    let app = Arc::new(TestApp::spawn(&ns).await);
    let mut sales = Vec::new();
    for _ in 0..6 {
        sales.push(app.flash_sale(25).await);
    }
    if cluster_seeds().is_some() {
        let slots: HashSet<u16> = sales
            .iter()
            .map(|v| seckill::keys::slot(ns.keys().outbox(*v).as_bytes()))
            .collect();
        assert!(slots.len() > 1, "the sales share one slot: the test proves nothing");
    }
    let results = join_all(
        sales
            .iter()
            .flat_map(|&v| (0..40).map(move |u| (v, 10_000 + u)))
            .map(|(v, user)| {
                let app = app.clone();
                tokio::spawn(async move { (v, user, app.order(v, user).await) })
            }),
    )
    .await;
    for &v in &sales {
        let accepted: Vec<i64> = results
            .iter()
            .map(|r| r.as_ref().unwrap())
            .filter(|(sale, _, (status, _))| *sale == v && *status == StatusCode::ACCEPTED)
            .map(|(_, user, _)| *user)
            .collect();
        assert_eq!(accepted.len(), 25, "sale {v} sells exactly its stock");
        assert_eq!(accepted.iter().collect::<HashSet<_>>().len(), 25, "no shopper twice");
    }
    for r in &results {
        let (_, _, (status, body)) = r.as_ref().unwrap();
        assert!(
            *status == StatusCode::ACCEPTED || (*status == StatusCode::CONFLICT && code(body) == "sold_out"),
            "{status} {body}"
        );
    }
    for &v in &sales {
        let persisted = eventually(Duration::from_secs(30), || async {
            (app.stats(v).await["orders_persisted"] == 25).then_some(())
        })
        .await;
        assert!(persisted.is_some(), "every accepted order of sale {v} persisted");
        assert_balanced(&app, v).await;
    }
}

/// `SECKILL_REDIS_WAIT_REPLICAS=1`. On a cluster (a replica per master) an order is
/// acknowledged once its replica holds it, and the sale sells exactly its stock.
/// On a node without replicas no order can be acknowledged: each gets 503 with
/// Retry-After, yet its reservation is on the master, so the shopper finds the
/// order with `…/orders/mine`, a retry answers `already_ordered`, and the order
/// reaches Postgres like any other.
#[tokio::test]
async fn orders_are_acknowledged_only_once_a_replica_holds_them() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns)
        .env("SECKILL_REDIS_WAIT_REPLICAS", "1")
        .env("SECKILL_REDIS_WAIT_TIMEOUT_MS", "100")
        .spawn()
        .await;
    let v = app.flash_sale(5).await;
    if cluster_seeds().is_some() {
        let mut accepted = 0;
        for user in 1..=8 {
            let (status, body) = app.order(v, user).await;
            match status {
                StatusCode::ACCEPTED => accepted += 1,
                StatusCode::CONFLICT => assert_eq!(code(&body), "sold_out"),
                other => panic!("unexpected {other}: {body}"),
            }
        }
        assert_eq!(accepted, 5);
        let persisted = eventually(Duration::from_secs(20), || async {
            (app.stats(v).await["orders_persisted"] == 5).then_some(())
        })
        .await;
        assert!(persisted.is_some());
        assert_balanced(&app, v).await;
        return;
    }
    let resp = app
        .client
        .post(format!("{}/api/v1/vouchers/{v}/orders", app.addr))
        .bearer_auth(app.shopper(42))
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.headers()["retry-after"], "1");
    assert_eq!(code(&resp.json().await.unwrap()), "unavailable");
    let (status, mine) = app
        .get(&format!("/api/v1/vouchers/{v}/orders/mine"), Some(&app.shopper(42)))
        .await;
    assert_eq!(status, StatusCode::OK, "the reservation is on the master: {mine}");
    let (status, again) = app.order(v, 42).await;
    assert_eq!((status, code(&again)), (StatusCode::CONFLICT, "already_ordered"));
    let persisted = eventually(Duration::from_secs(20), || async {
        (app.stats(v).await["orders_persisted"] == 1).then_some(())
    })
    .await;
    assert!(
        persisted.is_some(),
        "the unacknowledged order is persisted all the same"
    );
    assert_balanced(&app, v).await;
}
