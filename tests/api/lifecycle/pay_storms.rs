//! lifecycle: `one_shoppers_pay_storm_is_limited_and_others_are_served`.
use super::*;

/// One shopper's storm of pays (and another's of cancels), 200 concurrent requests
/// of one order each, while other shoppers order and pay: the storms' extra requests
/// get 429 with `Retry-After` at once (the per-shopper limit is checked before the
/// wait for the shopper's lock), and every other shopper's order is accepted and
/// their pay succeeds. No answer is a 5xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shoppers_pay_storm_is_limited_and_others_are_served() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns)
        .env("SECKILL_RATE_LIMIT_PAY_CANCEL_PER_USER", "5")
        .spawn()
        .await;
    let v = app.flash_sale(50).await;
    let (payer, canceller) = (created_order(&app, v, 7).await, created_order(&app, v, 8).await);
    let others = 100..120i64;
    let crowd = async {
        join_all(others.clone().map(|user| {
            let app = &app;
            async move {
                let (status, body) = app.order(v, user).await;
                assert_eq!(status, StatusCode::ACCEPTED, "shopper {user}'s order: {body}");
                let id = body["order_id"].as_str().unwrap().to_owned();
                eventually(Duration::from_secs(20), || async {
                    let (_, o) = app.get(&format!("/api/v1/orders/{id}"), Some(&app.shopper(user))).await;
                    (o["status"] == "created").then_some(())
                })
                .await
                .expect("order persisted");
                act(app, &id, user, "pay").await
            }
        }))
        .await
    };
    let ((pays, pay_took), (cancels, cancel_took), crowd) = tokio::join!(
        storm(&app, &payer, 7, "pay", 200),
        storm(&app, &canceller, 8, "cancel", 200),
        crowd
    );
    check_storm(&pays, pay_took, "order_not_payable");
    check_storm(&cancels, cancel_took, "order_not_cancellable");
    for (user, (status, body)) in others.zip(crowd) {
        assert_eq!(status, StatusCode::OK, "shopper {user}'s pay: {body}");
        assert_eq!(body["status"], "paid");
    }
    app.shutdown().await;
}
