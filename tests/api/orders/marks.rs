//! A shopper's mark ("order_id:created_ms" in the sale's `buyers` hash) is the only
//! record Redis keeps of a pending order: no index by order id, a count of the
//! orders admitted. These tests hold the mark to everything the index did: an
//! admin finds another shopper's pending order, with the time it is stored with; a
//! late admission counts an order once; and a sale that was selling across the
//! upgrade (marks that are the id alone, the old index) keeps its books.
use crate::helpers::*;
use reqwest::StatusCode;
use std::time::Duration;

/// Marks of shoppers who are not in the test, enough for several `HSCAN` pages
/// (of 1,000) in every shard of the sale.
async fn crowd_marks(app: &TestApp, keys: &seckill::keys::Keys, v: i64, shards: u32) {
    let mut conn = app.redis().await;
    for k in 0..shards {
        let mut hset = redis::cmd("HSET");
        hset.arg(keys.buyers_at(v, k, shards));
        for i in 0..2_500i64 {
            let user = 10_000_000 + i64::from(k) * 10_000 + i;
            hset.arg(user).arg(format!("{}:1700000000000", 7_000_000 + user));
        }
        let _: i64 = hset.query_async(&mut conn).await.unwrap();
    }
}

/// An admin looks up another shopper's pending order on a sale of four shards
/// whose marks span several scan pages: found, with its shopper, sale and time; the
/// owner sees the same; a made-up id in the sale's window is not found after the
/// whole scan. Once stored, the order keeps the time it had while pending, to the
/// millisecond (the mark carries it).
#[tokio::test]
async fn an_admin_finds_a_pending_order_by_the_marks_and_its_time_stays() {
    let ns = Namespace::new().await;
    // No relay: the order stays in the outbox, accepted but not persisted.
    let app = TestApp::builder(&ns).relay(false).spawn().await;
    let v = app.sharded_sale(10, 4).await;
    let keys = ns.keys();
    crowd_marks(&app, &keys, v, 4).await;
    let (status, body) = app.order(v, 42).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["order_id"].as_str().unwrap().to_owned();
    let (status, seen) = app.get(&format!("/api/v1/orders/{id}"), Some(&app.admin())).await;
    assert_eq!(status, StatusCode::OK, "{seen}");
    assert_eq!(
        (
            seen["status"].as_str(),
            seen["user_id"].as_str(),
            seen["voucher_id"].as_str()
        ),
        (Some("pending"), Some("42"), Some(v.to_string().as_str())),
        "{seen}"
    );
    let (status, own) = app.get(&format!("/api/v1/orders/{id}"), Some(&app.shopper(42))).await;
    assert_eq!(status, StatusCode::OK, "{own}");
    assert_eq!(own, seen, "the owner and the admin see the same pending order");
    let pending_at = seen["created_at"].as_str().unwrap().to_owned();
    // An id of the same second that nobody holds: every shard scanned, nothing found.
    let made_up = id.parse::<i64>().unwrap() + 1_000_000;
    let (status, body) = app.get(&format!("/api/v1/orders/{made_up}"), Some(&app.admin())).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "order_not_found"),
        "{body}"
    );
    app.shutdown().await;

    let app = TestApp::spawn(&ns).await;
    let stored = eventually(Duration::from_secs(15), || async {
        let (_, o) = app.get(&format!("/api/v1/orders/{id}"), Some(&app.admin())).await;
        (o["status"] == "created").then_some(o)
    })
    .await
    .expect("the order is persisted");
    let at = |s: &str| chrono::DateTime::parse_from_rfc3339(s).unwrap();
    assert_eq!(
        at(stored["created_at"].as_str().unwrap()),
        at(&pending_at),
        "the stored order keeps its pending time: {stored}"
    );
    app.shutdown().await;
}

/// A sale that was selling when this version replaced one that kept an index of
/// orders and marks of the id alone: a shopper with an old mark is told their
/// order, not sold twice; their order is found (with the second its id carries);
/// its cancellation puts the unit back and frees the shopper; and the sale's count
/// of admitted orders includes the old index's.
#[tokio::test]
async fn a_sale_selling_across_the_upgrade_keeps_its_shoppers_and_counts() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(5).await;
    let keys = ns.keys();
    // One order through this version, then its mark and count rewritten as the
    // older version would have left them.
    let (status, body) = app.order(v, 7).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id: i64 = body["order_id"].as_str().unwrap().parse().unwrap();
    let mut conn = app.redis().await;
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(keys.buyers(v))
        .arg(7)
        .arg(id)
        .ignore()
        .cmd("DEL")
        .arg(keys.admitted(v))
        .ignore()
        .cmd("HSET")
        .arg(keys.orders(v))
        .arg(id)
        .arg(format!("7:{}", chrono::Utc::now().timestamp_millis()))
        .ignore()
        .query_async(&mut conn)
        .await
        .unwrap();
    let (status, body) = app.order(v, 7).await;
    assert_eq!(
        (status, code(&body), body["error"]["order_id"].as_str()),
        (StatusCode::CONFLICT, "already_ordered", Some(id.to_string().as_str())),
        "{body}"
    );
    let (status, mine) = app
        .get(&format!("/api/v1/vouchers/{v}/orders/mine"), Some(&app.shopper(7)))
        .await;
    assert_eq!(
        (status, mine["order_id"].as_str()),
        (StatusCode::OK, Some(id.to_string().as_str()))
    );
    let (status, view) = app
        .get(&format!("/api/v1/admin/vouchers/{v}"), Some(&app.admin()))
        .await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["stats"]["orders_accepted"], 1, "the old index counts: {view}");
    assert_eq!(app.order(v, 8).await.0, StatusCode::ACCEPTED);
    let (_, view) = app
        .get(&format!("/api/v1/admin/vouchers/{v}"), Some(&app.admin()))
        .await;
    assert_eq!(
        view["stats"]["orders_accepted"], 2,
        "the old index and the counter: {view}"
    );
    wait_stored(&app, v, 2, Duration::from_secs(20), "both orders stored").await;
    // The owner cancels the order whose mark is the id alone: the unit goes back and
    // the shopper may buy again.
    let (status, body) = app
        .post(
            &format!("/api/v1/orders/{id}/cancel"),
            Some(&app.shopper(7)),
            serde_json::Value::Null,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    eventually(Duration::from_secs(10), || async {
        let marked: bool = redis::cmd("HEXISTS")
            .arg(keys.buyers(v))
            .arg(7)
            .query_async(&mut app.redis().await)
            .await
            .unwrap();
        (!marked).then_some(())
    })
    .await
    .expect("the cancellation removed the old mark");
    assert_eq!(app.order(v, 7).await.0, StatusCode::ACCEPTED, "the shopper buys again");
    app.shutdown().await;
}
