//! The HTTP service around the sale: liveness and readiness (naming each dependency
//! that does not answer), the error body of malformed requests, authentication and
//! roles, voucher validation, stock top-ups, and a clean stop on SIGTERM.
use crate::fixtures::spawn_binary;
use crate::helpers::*;
use reqwest::StatusCode;
use seckill::app::Mode;
use serde_json::{json, Value};

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
    assert_eq!(body["checks"]["redis_epoch"]["state"], "verified", "{body}");
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

/// The real binary refuses to serve with the development secret on a public
/// address, saying which variable to set; a short secret is refused too.
#[tokio::test]
async fn unsafe_set_ups_do_not_start() {
    let ns = Namespace::new().await;
    // Its exit and what it wrote to stderr; a process still running after 30 s
    // (it started) is killed and reported.
    let run = |env: Vec<(&'static str, String)>| {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_seckill"))
            .arg("serve")
            .envs(ns.vars.iter())
            .env_remove("SECKILL_JWT_SECRET")
            .envs(env)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run seckill");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                child.kill().unwrap();
                child.wait().unwrap();
                panic!("seckill serve started (still running after 30 s)");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        child.wait_with_output().unwrap()
    };
    for (env, says) in [
        (
            vec![("SECKILL_HTTP_ADDR", "0.0.0.0:0".to_owned())],
            "not a loopback address",
        ),
        (
            vec![("SECKILL_JWT_SECRET", "x".repeat(31))],
            "SECKILL_JWT_SECRET must be at least 32 bytes",
        ),
        // The published secret set by hand is no better than none.
        (
            vec![
                ("SECKILL_HTTP_ADDR", "0.0.0.0:0".to_owned()),
                ("SECKILL_JWT_SECRET", seckill::config::DEV_JWT_SECRET.to_owned()),
            ],
            "not a loopback address",
        ),
        // A name that does not resolve now could resolve to a public address later.
        (
            vec![("SECKILL_HTTP_ADDR", "no-such-host.invalid:0".to_owned())],
            "does not resolve",
        ),
    ] {
        let out = run(env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "started: {stderr}");
        assert!(
            stderr.contains("SECKILL_JWT_SECRET") && stderr.contains(says),
            "{stderr}"
        );
    }
}

#[tokio::test]
async fn voucher_validation_names_the_field() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let valid = json!({"shop_id": "3", "title": "t", "pay_value": 1, "actual_value": 2, "stock": 5,
                       "begin_at": "2030-01-01T00:00:00+08:00", "end_at": "2030-01-02T00:00:00+08:00"});
    let cases: Vec<(&str, Value)> = vec![
        ("stock", json!(-1)),
        ("pay_value", json!(-1)),
        ("actual_value", json!(-1)),
        ("title", json!("")),
        ("title", json!("x".repeat(256))),
        ("shop_id", json!("0")),
        ("shop_id", json!("18446744073709551616")),
        ("shop_id", json!("abc")),
        ("begin_at", json!("not a time")),
        ("end_at", json!("2029-12-31T00:00:00Z")),
        // Postgres cannot store a NUL character: 400, never the 500 it once was.
        ("title", json!("a\u{0}b")),
        ("sub_title", json!("\u{0}")),
        ("rules", json!("r\u{0}")),
        // Control and bidirectional formatting characters: a right-to-left override
        // makes a title read as something else wherever it is shown.
        ("title", json!("pay \u{202E}01$ off")),
        ("title", json!("bell\u{7}")),
        ("title", json!("two\nlines")),
        ("title", json!("\u{9b}31m")),
        ("sub_title", json!("\u{2066}isolated")),
        ("sub_title", json!("mark\u{200F}")),
        ("rules", json!("r\u{202D}")),
        ("rules", json!("\u{1b}[31mred")),
        // Year -1 in UTC: no RFC 3339 time could answer it (it was "-0001-12-31T23:00:00Z").
        ("begin_at", json!("0000-01-01T00:00:00+01:00")),
        ("end_at", json!("9999-12-31T23:00:00-01:00")),
    ];
    for (field, value) in cases {
        let mut body = valid.clone();
        body[field] = value.clone();
        let (status, resp) = app.post("/api/v1/admin/vouchers", Some(&app.admin()), body).await;
        assert_eq!(
            (status, code(&resp)),
            (StatusCode::BAD_REQUEST, "validation_failed"),
            "{field}={value}"
        );
        let message = resp["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(field), "{field}: {message}");
    }
    let (status, body) = app
        .post("/api/v1/admin/vouchers", Some(&app.admin()), valid.clone())
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(body["id"].is_string() && body["shop_id"] == "3");
    assert!(body["created_at"].is_string());
    // The title may be exactly 255 characters; an ordinary voucher has no stock.
    // Rules may have lines; any title may be in a right-to-left script.
    let ordinary = json!({"shop_id": 3, "title": "y".repeat(255), "pay_value": 0, "actual_value": 0,
                          "sub_title": "عرض خاص", "rules": "one\r\n\ttwo"});
    let (status, body) = app.post("/api/v1/admin/vouchers", Some(&app.admin()), ordinary).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(body.get("stock").is_none());
    let (status, list) = app.get("/api/v1/vouchers?shop_id=3", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["items"].as_array().unwrap().len(), 2);
    let (status, body) = app.get("/api/v1/vouchers", None).await;
    assert_eq!((status, code(&body)), (StatusCode::BAD_REQUEST, "validation_failed"));
    let (status, body) = app.get("/api/v1/vouchers/999999", None).await;
    assert_eq!((status, code(&body)), (StatusCode::NOT_FOUND, "voucher_not_found"));
    // JSON Schema's integer (which the OpenAPI document promises) includes 5.0.
    let whole = json!({"shop_id": 3.0, "title": "w", "pay_value": 1.0, "actual_value": 2e0});
    let (status, body) = app.post("/api/v1/admin/vouchers", Some(&app.admin()), whole).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        (body["shop_id"].as_str(), body["pay_value"].as_i64()),
        (Some("3"), Some(1))
    );
    app.shutdown().await;
}

#[tokio::test]
async fn stock_is_preloaded_and_top_ups_are_seen_at_once() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(10).await;
    let stats = app.stats(v).await;
    assert_eq!(
        stats,
        json!({"stock_remaining": 10, "orders_accepted": 0, "orders_persisted": 0})
    );
    let (status, body) = app
        .post(
            &format!("/api/v1/admin/vouchers/{v}/stock"),
            Some(&app.admin()),
            json!({"add": 5}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["stats"]["stock_remaining"], 15);
    assert_eq!(body["stock"], 15);
    let (_, public) = app.get(&format!("/api/v1/vouchers/{v}"), None).await;
    assert_eq!(public["stock_remaining"], 15);
    for bad in [json!({"add": 0}), json!({"add": -3}), json!({"add": "many"}), json!({})] {
        let (status, body) = app
            .post(
                &format!("/api/v1/admin/vouchers/{v}/stock"),
                Some(&app.admin()),
                bad.clone(),
            )
            .await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::BAD_REQUEST, "validation_failed"),
            "{bad}"
        );
    }
    let (status, body) = app
        .post(
            "/api/v1/admin/vouchers/424242/stock",
            Some(&app.admin()),
            json!({"add": 1}),
        )
        .await;
    assert_eq!((status, code(&body)), (StatusCode::NOT_FOUND, "voucher_not_found"));
    app.shutdown().await;
}

/// The real binary: SIGTERM stops it cleanly with exit code 0.
#[tokio::test]
async fn the_process_stops_cleanly_on_sigterm() {
    let ns = Namespace::new().await;
    let (mut child, port) = spawn_binary(&ns, &[]).await;
    let live = reqwest::get(format!("http://127.0.0.1:{port}/health/live"))
        .await
        .unwrap();
    assert_eq!(live.status(), StatusCode::OK);
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0), "exit status {status}");
    assert!(
        reqwest::get(format!("http://127.0.0.1:{port}/health/live"))
            .await
            .is_err(),
        "still listening after exit"
    );
}
