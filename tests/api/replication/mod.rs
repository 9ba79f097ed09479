//! Redis Cluster and replicated acknowledgements: several sales at once (their keys
//! in several hash slots), and `SECKILL_REDIS_WAIT_REPLICAS`. These run on one
//! node and, with `TEST_REDIS_CLUSTER` set (the test command does), on the local
//! cluster of `scripts/redis_cluster.sh`.
use crate::faults::crowd::{after_the_fault, assert_persisted, crowd, settle, Landing, Steady};
use crate::fixtures::{signal, spawn_serve_binary, spawn_worker_binary, OwnCluster, OwnRedis};
use crate::helpers::*;
use futures::future::join_all;
use reqwest::StatusCode;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

mod acknowledged;
mod failover;
mod masters;

/// With the sale's replica stopped: probes with new shoppers from `from` until one
/// is refused before it reserves (503 with Retry-After, no order of its own at
/// `…/orders/mine`), once the master reports the replica behind and the replica
/// watch read it. A 503 whose reservation is on the master (`WAIT` fell short
/// before that) must show at `…/orders/mine` and answer a retry with
/// `already_ordered` (or 503, once refused before it reserves). Then ten more
/// shoppers: all 503, and the sale's stock does not move. Returns the shoppers
/// whose 503 reserved.
async fn refused_before_reserving(app: &TestApp, v: i64, from: i64) -> Vec<i64> {
    let held = std::cell::RefCell::new(Vec::new());
    let mut probe = from;
    let refused = eventually(Duration::from_secs(30), || {
        probe += 1;
        let (app, user, held) = (app, probe, &held);
        async move {
            let resp = app
                .client
                .post(format!("{}/api/v1/vouchers/{v}/orders", app.addr))
                .bearer_auth(app.shopper(user))
                .json(&serde_json::json!({}))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE, "no replica: no 202");
            assert_eq!(resp.headers()["retry-after"], "1");
            assert_eq!(code(&resp.json().await.unwrap()), "unavailable");
            let (status, mine) = app
                .get(&format!("/api/v1/vouchers/{v}/orders/mine"), Some(&app.shopper(user)))
                .await;
            if status == StatusCode::OK {
                // Its retry: already ordered, or refused before it reserves once
                // the watch read the replica behind.
                let (status, again) = app.order(v, user).await;
                assert!(
                    [
                        (StatusCode::CONFLICT, "already_ordered"),
                        (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
                    ]
                    .contains(&(status, code(&again))),
                    "{again} {mine}"
                );
                held.borrow_mut().push(user);
                None
            } else {
                assert_eq!(status, StatusCode::NOT_FOUND, "{mine}");
                Some(user)
            }
        }
    })
    .await
    .expect("refused before reserving once the master reports its replica behind");
    let stock = app.stats(v).await["stock_remaining"].clone();
    for user in refused + 1..refused + 11 {
        let (status, body) = app.order(v, user).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    }
    assert_eq!(
        app.stats(v).await["stock_remaining"],
        stock,
        "refusals before reserving hold no unit"
    );
    held.into_inner()
}
