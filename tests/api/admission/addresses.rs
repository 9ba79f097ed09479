//! A sale's per-address cap on places and entries (`address_cap`):
//! `one_address_takes_at_most_its_cap_of_places_at_once` (early and late joins,
//! twenty at once; the `X-Forwarded-For` of an untrusted peer is ignored) and
//! `behind_a_trusted_proxy_each_forwarded_client_has_its_own_cap` (a raffle).
use super::raffle::enter;
use super::*;
use futures::stream::{self, StreamExt};

async fn joins_at_once(
    app: &TestApp,
    v: i64,
    users: std::ops::Range<i64>,
    forwarded: bool,
) -> Vec<(StatusCode, Value)> {
    stream::iter(users)
        .map(|user| async move {
            let xff = format!("198.51.100.{}", user % 200);
            let headers: Vec<(&str, &str)> = if forwarded {
                vec![("X-Forwarded-For", xff.as_str())]
            } else {
                vec![]
            };
            join(app, v, user, &headers).await
        })
        .buffer_unordered(20)
        .collect()
        .await
}

fn count(answers: &[(StatusCode, Value)], status: StatusCode) -> usize {
    answers.iter().filter(|(s, _)| *s == status).count()
}

/// Each answer's status and error code, for a failure's message.
fn brief(answers: &[(StatusCode, Value)]) -> Vec<(u16, String)> {
    answers.iter().map(|(s, b)| (s.as_u16(), code(b).to_owned())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_address_takes_at_most_its_cap_of_places_at_once() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let now = Utc::now();
    let queue = |cap: i64| json!({"admission": "queue", "admit_rate": 1000, "address_cap": cap});
    // Early joins, each claiming another forwarded address: an untrusted peer's
    // header is ignored, so all count as 127.0.0.1.
    let early = sale_with(
        &app,
        10,
        now + chrono::Duration::hours(1),
        now + chrono::Duration::hours(2),
        queue(3),
    )
    .await;
    let answers = joins_at_once(&app, early, 1..21, true).await;
    assert_eq!(count(&answers, StatusCode::CREATED), 3, "{:?}", brief(&answers));
    assert_eq!(count(&answers, StatusCode::FORBIDDEN), 17, "{:?}", brief(&answers));
    assert!(answers
        .iter()
        .filter(|(s, _)| *s == StatusCode::FORBIDDEN)
        .all(|(_, b)| code(b) == "address_cap_reached"));
    // Late joins of a running sale.
    let late = sale_with(
        &app,
        10,
        now - chrono::Duration::seconds(1),
        now + chrono::Duration::hours(1),
        queue(4),
    )
    .await;
    let answers = joins_at_once(&app, late, 1..21, false).await;
    assert_eq!(count(&answers, StatusCode::CREATED), 4, "{:?}", brief(&answers));
    let placed: i64 = sqlx::query_scalar("SELECT count(*) FROM queue_places WHERE voucher_id = $1")
        .bind(late)
        .fetch_one(app.pg())
        .await
        .unwrap();
    assert_eq!(placed, 4);
    // A shopper with a place joins again: the same place, not counted again.
    let places: Vec<i64> = sqlx::query_scalar("SELECT user_id FROM queue_places WHERE voucher_id = $1")
        .bind(late)
        .fetch_all(app.pg())
        .await
        .unwrap();
    let (status, body) = join(&app, late, places[0], &[]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Another sale: a cap of its own.
    let other = sale_with(
        &app,
        10,
        now - chrono::Duration::seconds(1),
        now + chrono::Duration::hours(1),
        queue(1),
    )
    .await;
    assert_eq!(join(&app, other, 1, &[]).await.0, StatusCode::CREATED);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_cap() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns)
        .env("SECKILL_TRUSTED_PROXIES", "127.0.0.1, 10.0.0.0/8")
        .spawn()
        .await;
    let now = Utc::now();
    let v = sale_with(
        &app,
        10,
        now + chrono::Duration::hours(1),
        now + chrono::Duration::hours(2),
        json!({"admission": "raffle", "address_cap": 2}),
    )
    .await;
    let enter_from = |user: i64, xff: &'static str| {
        let app = &app;
        async move {
            call_with(
                &app.client,
                &app.addr,
                reqwest::Method::POST,
                &format!("/api/v1/vouchers/{v}/raffle/entries"),
                &app.shopper(user),
                &[("X-Forwarded-For", xff)],
                None,
            )
            .await
        }
    };
    // Two from 192.0.2.7 (through two proxies of ours), then refused.
    assert_eq!(enter_from(1, "192.0.2.7, 10.1.1.1").await.0, StatusCode::CREATED);
    assert_eq!(enter_from(2, "192.0.2.7").await.0, StatusCode::CREATED);
    let (status, body) = enter_from(3, "6.6.6.6, 192.0.2.7, 10.9.9.9").await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "address_cap_reached"),
        "{body}"
    );
    // Another client behind the proxy: its own cap.
    assert_eq!(enter_from(3, "192.0.2.8").await.0, StatusCode::CREATED);
    // The proxy itself (no header): its own cap too.
    assert_eq!(enter(&app.addr, &app.shopper(4), v).await.0, StatusCode::CREATED);
    let entries: i64 = sqlx::query_scalar("SELECT count(*) FROM raffle_entries WHERE voucher_id = $1")
        .bind(v)
        .fetch_one(app.pg())
        .await
        .unwrap();
    assert_eq!(entries, 4);
    app.shutdown().await;
}
