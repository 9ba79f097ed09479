//! The order endpoint of a queue sale requires the shopper's admission token for
//! that sale: `tokens_forged_reused_expired_or_for_another_sale_are_refused`.
use super::*;
use seckill::admission::signing::Signer;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokens_forged_reused_expired_or_for_another_sale_are_refused() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let now = Utc::now();
    let (begin, end) = (now - chrono::Duration::seconds(1), now + chrono::Duration::hours(1));
    let queue = json!({"admission": "queue", "admit_rate": 1000});
    let v = sale_with(&app, 10, begin, end, queue.clone()).await;
    let other = sale_with(&app, 10, begin, end, queue).await;
    for (sale, user) in [(v, 1), (v, 2), (other, 1)] {
        assert_eq!(join(&app, sale, user, &[]).await.0, StatusCode::CREATED);
    }
    let a = admitted(&app, v, 1).await;
    let token = a["admission_token"].as_str().unwrap().to_owned();
    assert!(a["turn_ends_at"].is_string(), "{a}");

    // None.
    let (status, body) = order_with(&app, v, 1, None).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "admission_required"),
        "{body}"
    );
    // Forged: signed under another secret, or no token at all.
    let forged = Signer::new("not-the-service-secret-0123456789abcdef").admission_token(1, v, 4_000_000_000, None);
    for bad in [forged.as_str(), "garbage", &app.shopper(1)] {
        let (status, body) = order_with(&app, v, 1, Some(bad)).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::FORBIDDEN, "admission_invalid"),
            "{body}"
        );
    }
    // Another shopper's (user 2 is in the queue too, but this is user 1's token).
    let (status, body) = order_with(&app, v, 2, Some(&token)).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "admission_invalid"),
        "{body}"
    );
    // For another sale.
    let (status, body) = order_with(&app, other, 1, Some(&token)).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "admission_invalid"),
        "{body}"
    );
    // Expired: the service's own key, a second in the past.
    let signer = Signer::new(SECRET);
    let expired = signer.admission_token(1, v, (Utc::now().timestamp() - 1) as u64, None);
    let (status, body) = order_with(&app, v, 1, Some(&expired)).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "admission_expired"),
        "{body}"
    );
    // Nothing was taken by the refusals.
    assert_eq!(app.stats(v).await["stock_remaining"], 10);

    // The right one: once.
    let (status, body) = order_with(&app, v, 1, Some(&token)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (status, body) = order_with(&app, v, 1, Some(&token)).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "already_ordered"),
        "{body}"
    );
    // A first-come sale needs none.
    let plain = app.flash_sale(5).await;
    assert_eq!(app.order(plain, 1).await.0, StatusCode::ACCEPTED);
    wait_stored(&app, v, 1, std::time::Duration::from_secs(20), "the admitted order").await;
    app.shutdown().await;
}
