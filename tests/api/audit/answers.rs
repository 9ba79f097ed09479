//! audit: `audit_answers_401_403_404_400_and_409`.
use super::*;

#[tokio::test]
async fn audit_answers_401_403_404_400_and_409() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(5).await;
    let path = format!("/api/v1/admin/vouchers/{v}/audit");

    let (status, body) = app.get(&path, None).await;
    assert_eq!((status, code(&body)), (StatusCode::UNAUTHORIZED, "unauthorized"));
    let (status, body) = app.get(&path, Some("not-a-token")).await;
    assert_eq!((status, code(&body)), (StatusCode::UNAUTHORIZED, "unauthorized"));
    let (status, body) = app.get(&path, Some(&app.shopper(9))).await;
    assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "forbidden"));
    let (status, body) = app.get(&path, Some(&app.service())).await;
    assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "forbidden"));

    let admin = app.admin();
    let (status, body) = app
        .get(&format!("/api/v1/admin/vouchers/{}/audit", v + 1000), Some(&admin))
        .await;
    assert_eq!((status, code(&body)), (StatusCode::NOT_FOUND, "voucher_not_found"));
    assert!(body["error"]["message"].is_string(), "{body}");
    for bad in ["abc", "0", "-1", "99999999999999999999"] {
        let (status, body) = app
            .get(&format!("/api/v1/admin/vouchers/{bad}/audit"), Some(&admin))
            .await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::BAD_REQUEST, "validation_failed"),
            "{bad}"
        );
        assert!(body["error"]["message"].as_str().unwrap().starts_with("id"), "{body}");
    }

    // An ordinary voucher has no stock, hence no books.
    let (status, plain) = app
        .post(
            "/api/v1/admin/vouchers",
            Some(&admin),
            json!({"shop_id": "7", "title": "plain", "pay_value": 100, "actual_value": 1000}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{plain}");
    let plain = plain["id"].as_str().unwrap();
    let (status, body) = app
        .get(&format!("/api/v1/admin/vouchers/{plain}/audit"), Some(&admin))
        .await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "not_a_flash_sale"));
    app.shutdown().await;
}
