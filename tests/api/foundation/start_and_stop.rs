//! foundation: `unsafe_set_ups_do_not_start`, `voucher_validation_names_the_field`,
//! `stock_is_preloaded_and_top_ups_are_seen_at_once`,
//! `the_process_stops_cleanly_on_sigterm`.
use super::*;

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
