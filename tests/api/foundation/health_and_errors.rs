//! foundation: `liveness_and_readiness_answer_when_all_dependencies_are_up`,
//! `readiness_names_each_dependency_that_does_not_answer`,
//! `malformed_requests_get_the_error_body`,
//! `bad_tokens_get_401_and_missing_roles_403`.
use super::*;

#[tokio::test]
async fn liveness_and_readiness_answer_when_all_dependencies_are_up() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let (status, _) = app.get("/health/live", None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = app.get("/health/ready", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for dep in ["postgres", "redis", "rabbitmq"] {
        assert_eq!(body["checks"][dep], "up", "{body}");
    }
    // The machine's Redis keeps nothing on disk: readiness says what is at risk.
    assert_eq!(
        body["checks"]["redis_repairs"]["closed_sales"],
        serde_json::json!([]),
        "{body}"
    );
    let durability = &body["checks"]["redis_durability"];
    assert_eq!(durability["safe"], false, "{body}");
    assert!(
        durability["at_risk"]
            .as_str()
            .is_some_and(|s| s.contains("acknowledged order")),
        "{body}"
    );
    app.shutdown().await;
}

#[tokio::test]
async fn readiness_names_each_dependency_that_does_not_answer() {
    let ns = Namespace::new().await;
    // Nothing listens on port 1: each dependency in turn is "stopped".
    let cases = [
        ("DATABASE_URL", "postgres://root@127.0.0.1:1/nowhere", "postgres"),
        ("REDIS_URL", "redis://127.0.0.1:1", "redis"),
        ("AMQP_URL", "amqp://guest:guest@127.0.0.1:1/%2f", "rabbitmq"),
    ];
    for (var, url, name) in cases {
        // Migrations come from a healthy instance first, so only `var` is broken.
        let healthy = TestApp::spawn(&ns).await;
        let app = TestApp::builder(&ns)
            .env(var, url)
            .env("SECKILL_MIGRATE_ON_START", "false")
            .env("SECKILL_DEPENDENCY_TIMEOUT_MS", "500")
            .mode(Mode::Serve)
            .spawn()
            .await;
        let (status, body) = app.get("/health/ready", None).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{var}: {body}");
        assert_eq!(code(&body), "unavailable");
        assert_eq!(body["checks"][name], "down", "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains(name));
        for other in ["postgres", "redis", "rabbitmq"].into_iter().filter(|o| *o != name) {
            assert_eq!(body["checks"][other], "up", "{var}: {body}");
        }
        app.shutdown().await;
        healthy.shutdown().await;
    }
}

#[tokio::test]
async fn malformed_requests_get_the_error_body() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let (status, body) = app.get("/no/such/route", None).await;
    assert_eq!((status, code(&body)), (StatusCode::NOT_FOUND, "not_found"));

    let resp = app
        .client
        .post(format!("{}/api/v1/admin/vouchers", app.addr))
        .bearer_auth(app.admin())
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(code(&resp.json::<Value>().await.unwrap()), "invalid_json");

    let huge = json!({"shop_id": 1, "title": "x".repeat(200_000)});
    let (status, body) = app.post("/api/v1/admin/vouchers", Some(&app.admin()), huge).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );

    let (status, body) = app.get("/api/v1/vouchers/abc", None).await;
    assert_eq!((status, code(&body)), (StatusCode::BAD_REQUEST, "validation_failed"));

    // The shop list's page size and cursor.
    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=abc", "limit"),
        ("after=abc", "after"),
        ("after=0", "after"),
        ("after=-1", "after"),
    ] {
        let (status, body) = app.get(&format!("/api/v1/vouchers?shop_id=1&{query}"), None).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::BAD_REQUEST, "validation_failed"),
            "{query}"
        );
        assert!(
            body["error"]["message"].as_str().unwrap().starts_with(field),
            "{query}: {body}"
        );
    }

    // An Idempotency-Key that is empty, too long, not visible ASCII or sent twice:
    // 400 naming the header; one reused for another request: 422.
    let voucher = json!({"shop_id": 1, "title": "k", "pay_value": 1, "actual_value": 1});
    let long = "k".repeat(256);
    for keys in [vec![""], vec![long.as_str()], vec!["two words"], vec!["a", "b"]] {
        let mut req = app
            .client
            .post(format!("{}/api/v1/admin/vouchers", app.addr))
            .bearer_auth(app.admin())
            .json(&voucher);
        for key in &keys {
            req = req.header("Idempotency-Key", *key);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{keys:?}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(code(&body), "validation_failed");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("Idempotency-Key"),
            "{body}"
        );
    }
    let keyed = |body: Value| {
        app.client
            .post(format!("{}/api/v1/admin/vouchers", app.addr))
            .bearer_auth(app.admin())
            .header("Idempotency-Key", "k-1")
            .json(&body)
            .send()
    };
    assert_eq!(keyed(voucher.clone()).await.unwrap().status(), StatusCode::CREATED);
    let reused = keyed(json!({"shop_id": 2, "title": "k", "pay_value": 1, "actual_value": 1}))
        .await
        .unwrap();
    assert_eq!(reused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(code(&reused.json().await.unwrap()), "idempotency_key_reused");
    app.shutdown().await;
}

#[tokio::test]
async fn bad_tokens_get_401_and_missing_roles_403() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let other = seckill::http::auth::JwtKeys::new("some-other-secret-entirely");
    let expired = {
        use jsonwebtoken::{encode, EncodingKey, Header};
        let claims = json!({"sub": "1", "role": "admin", "exp": chrono::Utc::now().timestamp() - 10});
        encode(
            &Header::default(),
            &claims,
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap()
    };
    let non_numeric = {
        use jsonwebtoken::{encode, EncodingKey, Header};
        let claims = json!({"sub": "alice", "role": "admin", "exp": chrono::Utc::now().timestamp() + 600});
        encode(
            &Header::default(),
            &claims,
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap()
    };
    let no_sub = {
        use jsonwebtoken::{encode, EncodingKey, Header};
        let claims = json!({"role": "admin", "exp": chrono::Utc::now().timestamp() + 600});
        encode(
            &Header::default(),
            &claims,
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap()
    };
    let hs512 = {
        use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
        let claims = json!({"sub": "1", "role": "admin", "exp": chrono::Utc::now().timestamp() + 600});
        encode(
            &Header::new(Algorithm::HS512),
            &claims,
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap()
    };
    let now = chrono::Utc::now().timestamp();
    let signed = |claims: Value| {
        use jsonwebtoken::{encode, EncodingKey, Header};
        encode(
            &Header::default(),
            &claims,
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap()
    };
    // Longer-lived than SECKILL_JWT_MAX_TTL_SECS (default a day), by iat or from now.
    let long_lived = signed(json!({"sub": "1", "role": "admin", "iat": now, "exp": now + 86_401}));
    let long_lived_no_iat = signed(json!({"sub": "1", "role": "admin", "exp": now + 30 * 86_400}));
    let not_yet = signed(json!({"sub": "1", "role": "admin", "nbf": now + 600, "exp": now + 900}));
    // {"alg":"none"} with admin claims and no signature.
    let alg_none = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiIxIiwiZXhwIjo5OTk5OTk5OTk5LCJyb2xlIjoiYWRtaW4ifQ.";
    let wrong = other.mint(1, seckill::http::auth::Role::Admin, 600);
    for token in [
        None,
        Some("garbage"),
        Some(alg_none),
        Some(&wrong),
        Some(&expired),
        Some(&non_numeric),
        Some(&no_sub),
        Some(&hs512),
        Some(&long_lived),
        Some(&long_lived_no_iat),
        Some(&not_yet),
    ] {
        let (status, body) = app.get("/api/v1/admin/vouchers/1", token).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::UNAUTHORIZED, "unauthorized"),
            "{token:?}"
        );
    }
    let resp = app
        .client
        .get(format!("{}/api/v1/admin/vouchers/1", app.addr))
        .header("Authorization", "Basic dXNlcjpwYXNz")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);

    let (status, body) = app.get("/api/v1/admin/vouchers/1", Some(&app.shopper(5))).await;
    assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "forbidden"));
    let (status, body) = app.get("/api/v1/admin/vouchers/1", Some(&app.service())).await;
    assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "forbidden"));

    // The shopper routes are for shoppers: admin and service tokens get 403 there,
    // while an order's status stays readable by an admin.
    let v = app.flash_sale(5).await;
    let (status, body) = app.order(v, 9).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let order = body["order_id"].as_str().unwrap().to_owned();
    for token in [app.admin(), app.service()] {
        for (method, path) in [
            (reqwest::Method::POST, format!("/api/v1/vouchers/{v}/orders")),
            (reqwest::Method::GET, format!("/api/v1/vouchers/{v}/orders/mine")),
            (reqwest::Method::POST, format!("/api/v1/orders/{order}/pay")),
            (reqwest::Method::POST, format!("/api/v1/orders/{order}/cancel")),
        ] {
            let (status, body) = app.request(method, &path, Some(&token), None).await;
            assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "forbidden"), "{path}");
        }
    }
    let (status, body) = app.get(&format!("/api/v1/orders/{order}"), Some(&app.admin())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    app.shutdown().await;
}
