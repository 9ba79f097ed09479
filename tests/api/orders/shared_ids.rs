//! orders: `two_shoppers_given_one_id_each_keep_their_order`.
//!
//! Ids are unique by design (blocks reserved in Postgres); should two orders get
//! one anyway (here: two processes handed the same block, as a Postgres restored
//! from an older backup would), both are orders: both stored, each found, paid and
//! cancelled by its shopper under the id that shopper was given, and the worker
//! counts the collision.
use super::*;
use seckill::app::Mode;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shoppers_given_one_id_each_keep_their_order() {
    let ns = Namespace::new().await;
    // `a` takes orders, relays and persists; `b` takes orders and relays.
    // The collision is forced: its incident is asserted below.
    let a = TestApp::builder(&ns)
        .env("SECKILL_ID_BLOCK", "50")
        .forces_incidents(&["id_collision"])
        .spawn()
        .await;
    let v = a.flash_sale(100).await;
    // The watermark of the day's order ids set back to before `a`'s blocks: `b`
    // takes the same ones.
    let reset = sqlx::query("UPDATE counter_watermarks SET high = 0 WHERE scope LIKE 'order_id:%'")
        .execute(a.pg())
        .await
        .unwrap();
    assert_eq!(reset.rows_affected(), 1, "one scope of order ids");
    // And the witness that would catch it (`sequence::witness`) forgotten too: this
    // tests the worker's backstop behind it.
    let scopes: Vec<String> = sqlx::query_scalar("SELECT scope FROM counter_watermarks WHERE scope LIKE 'order_id:%'")
        .fetch_all(a.pg())
        .await
        .unwrap();
    for scope in scopes {
        let key = a.app().state().handles.keys.counter_witness(&scope);
        let mut c = a.redis().await;
        let gone: i64 = redis::cmd("DEL").arg(&key).query_async(&mut c).await.unwrap();
        assert_eq!(gone, 1, "{key}");
    }
    let b = TestApp::builder(&ns)
        .env("SECKILL_ID_BLOCK", "50")
        .mode(Mode::Serve)
        .spawn()
        .await;
    // The n-th order of each takes the same counter; the id is the same when both
    // come in the same second. Both at once, just after a second begins.
    let mut shared = None;
    for pair in 0..5i64 {
        let ms = chrono::Utc::now().timestamp_subsec_millis() as u64;
        tokio::time::sleep(Duration::from_millis(1000 - ms + 20)).await;
        let (x, y) = (100 + 2 * pair, 101 + 2 * pair);
        let ((sa, ba), (sb, bb)) = tokio::join!(a.order(v, x), b.order(v, y));
        assert_eq!((sa, sb), (StatusCode::ACCEPTED, StatusCode::ACCEPTED), "{ba} {bb}");
        if ba["order_id"] == bb["order_id"] {
            shared = Some((ba["order_id"].as_str().unwrap().to_owned(), x, y));
            break;
        }
    }
    let (id, x, y) = shared.expect("two orders given one id within five tries");
    // Both stored, each as its shopper's, both `created`.
    let stored = eventually(Duration::from_secs(30), || async {
        let rows: Vec<(i64, String, Option<i64>)> = sqlx::query_as(
            "SELECT user_id, status, issued_id FROM voucher_orders WHERE voucher_id = $1 AND user_id = ANY($2)",
        )
        .bind(v)
        .bind(vec![x, y])
        .fetch_all(a.pg())
        .await
        .unwrap();
        (rows.len() == 2).then_some(rows)
    })
    .await
    .expect("both orders stored within 30 s");
    assert!(stored.iter().all(|r| r.1 == "created"), "{stored:?}");
    assert_eq!(
        stored.iter().filter(|r| r.2.is_some()).count(),
        1,
        "one under a fresh id: {stored:?}"
    );
    assert_eq!(
        a.metric("seckill_worker_incidents_total{kind=\"id_collision\"}").await,
        1.0,
        "the collision counted"
    );
    // Each shopper finds their own order under the id they were given.
    for u in [x, y] {
        let (s, body) = a.get(&format!("/api/v1/orders/{id}"), Some(&a.shopper(u))).await;
        assert_eq!(s, StatusCode::OK, "{body}");
        assert_eq!(
            (body["order_id"].as_str(), body["user_id"].as_str()),
            (Some(id.as_str()), Some(u.to_string().as_str())),
            "{body}"
        );
        let (s, body) = a
            .get(&format!("/api/v1/vouchers/{v}/orders/mine"), Some(&a.shopper(u)))
            .await;
        assert_eq!(s, StatusCode::OK, "{body}");
        assert_eq!(body["order_id"].as_str(), Some(id.as_str()), "{body}");
    }
    // The one pays, the other cancels: each touches only their own.
    let (s, body) = a
        .post(&format!("/api/v1/orders/{id}/pay"), Some(&a.shopper(x)), json!({}))
        .await;
    assert_eq!((s, body["status"].as_str()), (StatusCode::OK, Some("paid")), "{body}");
    let (s, body) = a
        .post(&format!("/api/v1/orders/{id}/cancel"), Some(&a.shopper(y)), json!({}))
        .await;
    assert_eq!(
        (s, body["status"].as_str()),
        (StatusCode::OK, Some("cancelled")),
        "{body}"
    );
    assert_eq!(body["user_id"].as_str(), Some(y.to_string().as_str()));
    let (_, body) = a.get(&format!("/api/v1/orders/{id}"), Some(&a.shopper(x))).await;
    assert_eq!(body["status"].as_str(), Some("paid"), "{body}");
    // The cancelled shopper's unit is back and their mark gone: they may buy again.
    let returned = eventually(Duration::from_secs(10), || async {
        let (s, body) = a.order(v, y).await;
        (s == StatusCode::ACCEPTED).then_some(body)
    })
    .await;
    assert!(returned.is_some(), "the shopper whose order was cancelled buys again");
    b.shutdown().await;
    a.shutdown().await;
}
