//! conventions: `created_and_accepted_answers_say_where_the_resource_is`,
//! `every_answer_carries_a_request_id`,
//! `a_rate_limited_answer_carries_a_request_id`,
//! `already_ordered_names_the_existing_order`,
//! `an_idempotency_key_creates_one_voucher`, `an_idempotency_key_tops_up_once`,
//! `an_idempotency_key_is_kept_a_day`.
use super::*;

#[tokio::test]
async fn created_and_accepted_answers_say_where_the_resource_is() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let (status, location, voucher) = post_keyed(&app, "/api/v1/admin/vouchers", None, &flash_body("loc")).await;
    assert_eq!(status, StatusCode::CREATED, "{voucher}");
    let id = voucher["id"].as_str().unwrap();
    let location = location.expect("201 with Location");
    assert_eq!(location, format!("/api/v1/admin/vouchers/{id}"));
    let (status, body) = app.get(&location, Some(&app.admin())).await;
    assert_eq!((status, &body["id"]), (StatusCode::OK, &voucher["id"]));

    let resp = app
        .client
        .post(format!("{}/api/v1/vouchers/{id}/orders", app.addr))
        .bearer_auth(app.shopper(5))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    let location = resp.headers()["location"].to_str().unwrap().to_owned();
    let placed: Value = resp.json().await.unwrap();
    let order_id = placed["order_id"].as_str().unwrap();
    assert_eq!(location, format!("/api/v1/orders/{order_id}"));
    let (status, order) = app.get(&location, Some(&app.shopper(5))).await;
    assert_eq!((status, order["order_id"].as_str()), (StatusCode::OK, Some(order_id)));
    app.shutdown().await;
}

/// The caller's id comes back when it is usable, any other gets a fresh one, and
/// every kind of answer carries one: a success, a refusal by the router, by the
/// token check, by validation, by the body reader.
#[tokio::test]
async fn every_answer_carries_a_request_id() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let send = |method: reqwest::Method, path: &str, id: Option<&str>| {
        let mut req = app.client.request(method, format!("{}{path}", app.addr));
        if let Some(id) = id {
            req = req.header("X-Request-Id", id);
        }
        async move {
            let resp = req.send().await.unwrap();
            let status = resp.status();
            let id = resp
                .headers()
                .get("x-request-id")
                .map(|v| v.to_str().unwrap().to_owned());
            (status, id)
        }
    };
    let mine = "client-7f3a_1.2:3";
    for (method, path, status) in [
        (reqwest::Method::GET, "/health/live", StatusCode::OK),
        (reqwest::Method::GET, "/no/such/route", StatusCode::NOT_FOUND),
        (
            reqwest::Method::DELETE,
            "/api/v1/vouchers/1",
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            reqwest::Method::GET,
            "/api/v1/admin/vouchers/1",
            StatusCode::UNAUTHORIZED,
        ),
        (reqwest::Method::GET, "/api/v1/vouchers/abc", StatusCode::BAD_REQUEST),
        (
            reqwest::Method::POST,
            "/api/v1/admin/vouchers",
            StatusCode::UNAUTHORIZED,
        ),
    ] {
        assert_eq!(
            send(method.clone(), path, Some(mine)).await,
            (status, Some(mine.to_owned())),
            "{path}"
        );
        let (got, fresh) = send(method.clone(), path, None).await;
        let fresh = fresh.unwrap_or_else(|| panic!("{method} {path}: {got} without X-Request-Id"));
        assert!(
            fresh.len() == 32 && fresh.bytes().all(|b| b.is_ascii_hexdigit()),
            "{fresh}"
        );
    }
    let long = "a".repeat(129);
    for unusable in [long.as_str(), "two words", "<x>", "semi;colon"] {
        let (_, id) = send(reqwest::Method::GET, "/health/live", Some(unusable)).await;
        let id = id.expect("an id");
        assert!(id != unusable && id.len() == 32, "{unusable:?} came back as {id:?}");
    }
    let (_, a) = send(reqwest::Method::GET, "/health/live", None).await;
    let (_, b) = send(reqwest::Method::GET, "/health/live", None).await;
    assert_ne!(a, b, "each request gets its own id");
    app.shutdown().await;
}

/// Refusals of admission control carry the id too (the middleware is outermost).
#[tokio::test]
async fn a_rate_limited_answer_carries_a_request_id() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns)
        .env("SECKILL_RATE_LIMIT_PER_IP", "1")
        .spawn()
        .await;
    let mut limited = None;
    for _ in 0..50 {
        let resp = app
            .client
            .get(format!("{}/api/v1/vouchers/abc", app.addr))
            .header("X-Request-Id", "flood")
            .send()
            .await
            .unwrap();
        if resp.status() == StatusCode::TOO_MANY_REQUESTS {
            limited = Some(resp.headers().get("x-request-id").cloned());
            break;
        }
    }
    let id = limited.expect("the per-address limit answered 429");
    assert_eq!(id.as_ref().map(|v| v.to_str().unwrap()), Some("flood"));
    app.shutdown().await;
}

/// A shopper who orders again learns the order they have, from the one script
/// call (no extra round trip), on a sale of one shard and on a sharded one.
#[tokio::test]
async fn already_ordered_names_the_existing_order() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let single = app.flash_sale(10).await;
    let sharded = app.sharded_sale(40, 4).await;
    for (v, users) in [(single, 1..=2), (sharded, 11..=18)] {
        for user in users {
            let (status, first) = app.order(v, user).await;
            assert_eq!(status, StatusCode::ACCEPTED, "{first}");
            let calls = reserve_calls(&app).await;
            let (status, again) = app.order(v, user).await;
            assert_eq!((status, code(&again)), (StatusCode::CONFLICT, "already_ordered"));
            assert_eq!(again["error"]["order_id"], first["order_id"], "{again}");
            assert_eq!(reserve_calls(&app).await, calls + 1, "one script call for the repeat");
        }
    }
    app.shutdown().await;
}

/// Creating a voucher with a key twice creates one, answers alike (Location
/// too); the same key with another body is refused; many requests with one key
/// at once create one voucher.
#[tokio::test]
async fn an_idempotency_key_creates_one_voucher() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let body = flash_body("once");
    let first = post_keyed(&app, "/api/v1/admin/vouchers", Some("create-1"), &body).await;
    assert_eq!(first.0, StatusCode::CREATED, "{}", first.2);
    let again = post_keyed(&app, "/api/v1/admin/vouchers", Some("create-1"), &body).await;
    assert_eq!(again, first, "a retry gets the first answer");
    let mut other = body.clone();
    other["title"] = json!("another");
    let (status, _, refused) = post_keyed(&app, "/api/v1/admin/vouchers", Some("create-1"), &other).await;
    assert_eq!(
        (status, code(&refused)),
        (StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused")
    );
    // Extra members are allowed in a body, whatever they hold (a NUL character
    // included, which a jsonb column could not store).
    let mut odd = flash_body("odd");
    odd["note\u{0}"] = json!("a\u{0}b");
    let first_odd = post_keyed(&app, "/api/v1/admin/vouchers", Some("create-odd"), &odd).await;
    assert_eq!(first_odd.0, StatusCode::CREATED, "{}", first_odd.2);
    assert_eq!(
        post_keyed(&app, "/api/v1/admin/vouchers", Some("create-odd"), &odd).await,
        first_odd
    );
    // A different key is a different request.
    let (status, _, second) = post_keyed(&app, "/api/v1/admin/vouchers", Some("create-2"), &body).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_ne!(second["id"], first.2["id"]);

    let racing = flash_body("racing");
    let answers = futures::future::join_all(
        (0..8).map(|_| post_keyed(&app, "/api/v1/admin/vouchers", Some("create-race"), &racing)),
    )
    .await;
    for answer in &answers {
        assert_eq!(answer, &answers[0], "every racer gets the one answer");
    }
    assert_eq!(answers[0].0, StatusCode::CREATED);
    let made: i64 = sqlx::query_scalar("SELECT count(*) FROM vouchers WHERE title = 'racing'")
        .fetch_one(app.pg())
        .await
        .unwrap();
    assert_eq!(made, 1, "one voucher for one key");
    app.shutdown().await;
}

/// A top-up with a key adds its units once, however often and however
/// concurrently it is sent; a retry whose first answer was never stored (the
/// first request died after its commit) rebuilds that answer and adds nothing.
#[tokio::test]
async fn an_idempotency_key_tops_up_once() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(10).await;
    let path = format!("/api/v1/admin/vouchers/{v}/stock");
    let add = json!({"add": 5});
    let first = post_keyed(&app, &path, Some("top-1"), &add).await;
    assert_eq!(first.0, StatusCode::OK, "{}", first.2);
    assert_eq!(post_keyed(&app, &path, Some("top-1"), &add).await, first);
    let (status, _, refused) = post_keyed(&app, &path, Some("top-1"), &json!({"add": 6})).await;
    assert_eq!(
        (status, code(&refused)),
        (StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused")
    );
    // The same key and body on another voucher is another request.
    let w = app.flash_sale(1).await;
    let (status, _, _) = post_keyed(&app, &format!("/api/v1/admin/vouchers/{w}/stock"), Some("top-1"), &add).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);

    let seven = json!({"add": 7});
    let answers = futures::future::join_all((0..8).map(|_| post_keyed(&app, &path, Some("top-race"), &seven))).await;
    for answer in &answers {
        assert_eq!(answer.0, StatusCode::OK, "{}", answer.2);
        assert_eq!(
            answer.2["top_up"], answers[0].2["top_up"],
            "every racer names the one top-up"
        );
    }

    sqlx::query("UPDATE idempotency_keys SET status = NULL, response = NULL WHERE key = 'top-1'")
        .execute(app.pg())
        .await
        .unwrap();
    let rebuilt = post_keyed(&app, &path, Some("top-1"), &add).await;
    assert_eq!(rebuilt.0, StatusCode::OK, "{}", rebuilt.2);
    assert_eq!(rebuilt.2["top_up"], first.2["top_up"]);

    let (status, voucher) = app
        .get(&format!("/api/v1/admin/vouchers/{v}"), Some(&app.admin()))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(voucher["stock"], 10 + 5 + 7, "each key added once: {voucher}");
    assert_eq!(voucher["stats"]["stock_remaining"], 22);
    let topups: i64 = sqlx::query_scalar("SELECT count(*) FROM stock_topups WHERE voucher_id = $1")
        .bind(v)
        .fetch_one(app.pg())
        .await
        .unwrap();
    assert_eq!(topups, 2);
    app.shutdown().await;
}

/// A key is kept a day: younger, it answers as the first request did (another
/// body: 422); past its day, it is a new key (another body creates a voucher),
/// and the sweep deletes it (before, keys were kept for ever).
#[tokio::test]
async fn an_idempotency_key_is_kept_a_day() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let age = |key: &'static str, hours: i32| {
        let pg = app.pg().clone();
        async move {
            sqlx::query("UPDATE idempotency_keys SET created_at = now() - make_interval(hours => $2) WHERE key = $1")
                .bind(key)
                .bind(hours)
                .execute(&pg)
                .await
                .unwrap();
        }
    };
    let path = "/api/v1/admin/vouchers";
    let (body_1, body_2, body_3) = (flash_body("first"), flash_body("second"), flash_body("kept"));
    let first = post_keyed(&app, path, Some("day-old"), &body_1).await;
    assert_eq!(first.0, StatusCode::CREATED, "{}", first.2);
    age("day-old", 23).await;
    assert_eq!(post_keyed(&app, path, Some("day-old"), &body_1).await, first);
    let (status, _, refused) = post_keyed(&app, path, Some("day-old"), &body_2).await;
    assert_eq!(
        (status, code(&refused)),
        (StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused"),
        "23 hours old"
    );
    age("day-old", 25).await;
    let second = post_keyed(&app, path, Some("day-old"), &body_2).await;
    assert_eq!(second.0, StatusCode::CREATED, "25 hours old: a new key: {}", second.2);
    assert_ne!(second.2["id"], first.2["id"]);
    assert_eq!(post_keyed(&app, path, Some("day-old"), &body_2).await, second);
    // The sweep deletes the keys past their day, and only those.
    let other = post_keyed(&app, path, Some("kept"), &body_3).await;
    assert_eq!(other.0, StatusCode::CREATED);
    age("day-old", 25).await;
    assert_eq!(seckill::http::idempotency::forget_expired(app.pg()).await.unwrap(), 1);
    let left: Vec<String> = sqlx::query_scalar("SELECT key FROM idempotency_keys ORDER BY key")
        .fetch_all(app.pg())
        .await
        .unwrap();
    assert_eq!(left, vec!["kept".to_owned()]);
    app.shutdown().await;
}
