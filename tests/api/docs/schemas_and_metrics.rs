//! docs: `every_schema_is_a_real_type_and_responses_match_the_document`,
//! `the_metrics_move_during_an_order`.
use super::*;

#[tokio::test]
async fn every_schema_is_a_real_type_and_responses_match_the_document() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let (_, doc) = app.get("/api-docs/openapi.json", None).await;
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let shadows: Vec<_> = schemas.keys().filter(|name| name.ends_with("Doc")).collect();
    assert!(shadows.is_empty(), "documentation-only schemas remain: {shadows:?}");

    let (admin, shopper) = (app.admin(), app.shopper(5));
    let mut seen = Vec::new();
    let flash = json!({"shop_id": "7", "title": "flash", "pay_value": 100, "actual_value": 1000, "stock": 2,
                       "begin_at": "2020-01-01T00:00:00+08:00", "end_at": "2099-01-01T00:00:00Z"});
    let plain = json!({"shop_id": 7, "title": "plain", "rules": "r", "pay_value": 1, "actual_value": 2});
    for body in [flash, plain] {
        seen.push((
            "post",
            "/api/v1/admin/vouchers",
            app.post("/api/v1/admin/vouchers", Some(&admin), body).await,
        ));
    }
    for id in [1, 2] {
        let admin_view = app.get(&format!("/api/v1/admin/vouchers/{id}"), Some(&admin)).await;
        seen.push(("get", "/api/v1/admin/vouchers/{id}", admin_view));
        seen.push((
            "get",
            "/api/v1/vouchers/{id}",
            app.get(&format!("/api/v1/vouchers/{id}"), None).await,
        ));
        let stock = app
            .post(
                &format!("/api/v1/admin/vouchers/{id}/stock"),
                Some(&admin),
                json!({"add": 1}),
            )
            .await;
        seen.push(("post", "/api/v1/admin/vouchers/{id}/stock", stock));
        let audit = app
            .get(&format!("/api/v1/admin/vouchers/{id}/audit"), Some(&admin))
            .await;
        seen.push(("get", "/api/v1/admin/vouchers/{id}/audit", audit));
        let live = app
            .get(&format!("/api/v1/admin/vouchers/{id}/live"), Some(&admin))
            .await;
        seen.push(("get", "/api/v1/admin/vouchers/{id}/live", live));
        // Paused for a moment (the flash sale) or 409 (the plain voucher).
        for (verb, documented) in [
            ("pause", "/api/v1/admin/vouchers/{id}/pause"),
            ("resume", "/api/v1/admin/vouchers/{id}/resume"),
        ] {
            let answer = app
                .post(&format!("/api/v1/admin/vouchers/{id}/{verb}"), Some(&admin), json!({}))
                .await;
            seen.push(("post", documented, answer));
        }
    }
    for query in ["limit=1", "limit=1&before=2", "limit=0"] {
        let page = app.get(&format!("/api/v1/admin/vouchers?{query}"), Some(&admin)).await;
        seen.push(("get", "/api/v1/admin/vouchers", page));
    }
    seen.push((
        "post",
        "/api/v1/admin/vouchers/{id}/pause",
        app.post("/api/v1/admin/vouchers/9/pause", Some(&admin), json!({}))
            .await,
    ));
    seen.push((
        "get",
        "/api/v1/vouchers",
        app.get("/api/v1/vouchers?shop_id=7", None).await,
    ));
    seen.push(("get", "/api/v1/vouchers", app.get("/api/v1/vouchers", None).await));
    seen.push((
        "get",
        "/api/v1/vouchers",
        app.get("/api/v1/vouchers?shop_id=7&limit=1&after=1", None).await,
    ));
    seen.push((
        "get",
        "/api/v1/vouchers/{id}",
        app.get("/api/v1/vouchers/9", None).await,
    ));
    let placed = app.order(1, 5).await;
    let order_id = placed.1["order_id"].as_str().unwrap().to_owned();
    seen.push(("post", "/api/v1/vouchers/{id}/orders", placed));
    seen.push(("post", "/api/v1/vouchers/{id}/orders", app.order(1, 5).await));
    seen.push(("post", "/api/v1/vouchers/{id}/orders", app.order(1, 6).await));
    let order = format!("/api/v1/orders/{order_id}");
    seen.push((
        "get",
        "/api/v1/orders/{order_id}",
        app.get(&order, Some(&shopper)).await,
    ));
    eventually(Duration::from_secs(10), || async {
        (app.get(&order, Some(&shopper)).await.1["status"] == "created").then_some(())
    })
    .await
    .expect("the order is persisted");
    let pay = app.post(&format!("{order}/pay"), Some(&shopper), json!({})).await;
    seen.push(("post", "/api/v1/orders/{order_id}/pay", pay));
    let cancel = app.post(&format!("{order}/cancel"), Some(&shopper), json!({})).await;
    seen.push(("post", "/api/v1/orders/{order_id}/cancel", cancel));
    let mine = app.get("/api/v1/vouchers/1/orders/mine", Some(&shopper)).await;
    seen.push(("get", "/api/v1/vouchers/{id}/orders/mine", mine));
    seen.push((
        "get",
        "/api/v1/orders/{order_id}",
        app.get(&order, Some(&app.shopper(6))).await,
    ));
    let rule = json!({"prefix": "YD", "date_format": "yyMMdd", "min_width": 3});
    let put = app
        .request(
            reqwest::Method::PUT,
            "/api/v1/admin/sequences/yd",
            Some(&admin),
            Some(rule),
        )
        .await;
    seen.push(("put", "/api/v1/admin/sequences/{name}", put));
    let next = app
        .post(
            "/api/v1/sequences/yd/next",
            Some(&admin),
            json!({"tenant_id": 1, "count": 2}),
        )
        .await;
    seen.push(("post", "/api/v1/sequences/{name}/next", next));
    let nope = app
        .post("/api/v1/sequences/nope/next", Some(&shopper), json!({"tenant_id": "1"}))
        .await;
    seen.push(("post", "/api/v1/sequences/{name}/next", nope));
    seen.push((
        "get",
        "/api/v1/admin/vouchers/{id}",
        app.get("/api/v1/admin/vouchers/1", None).await,
    ));

    // An Idempotency-Key reused for another request.
    for title in ["first", "second"] {
        let resp = app
            .client
            .post(format!("{}/api/v1/admin/vouchers", app.addr))
            .bearer_auth(&admin)
            .header("Idempotency-Key", "docs")
            .json(&json!({"shop_id": 7, "title": title, "pay_value": 1, "actual_value": 2}))
            .send()
            .await
            .unwrap();
        let status = resp.status();
        seen.push(("post", "/api/v1/admin/vouchers", (status, resp.json().await.unwrap())));
    }

    // A JSON endpoint refuses a body sent without Content-Type, as documented.
    let untyped = app
        .client
        .post(format!("{}/api/v1/admin/vouchers", app.addr))
        .bearer_auth(&admin)
        .body("{}")
        .send()
        .await
        .unwrap();
    let status = untyped.status();
    seen.push((
        "post",
        "/api/v1/admin/vouchers",
        (status, untyped.json().await.unwrap()),
    ));
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);

    // The checker itself catches a missing field, an unknown one and a wrong type.
    let mut problems = Vec::new();
    let accepted = json!({"$ref": "#/components/schemas/Accepted"});
    conform(
        &doc,
        &accepted,
        &json!({"order_id": 1, "extra": 1}),
        "$",
        true,
        &mut problems,
    );
    assert_eq!(problems.len(), 3, "{problems:?}");

    let statuses: BTreeSet<u16> = seen.iter().map(|(_, _, (s, _))| s.as_u16()).collect();
    assert_eq!(
        statuses,
        BTreeSet::from([200, 201, 202, 400, 401, 403, 404, 409, 415, 422]),
        "the responses cover successes and errors"
    );
    for (method, path, (status, body)) in &seen {
        let response = &doc["paths"][path][method]["responses"][status.as_str()];
        let schema = &response["content"]["application/json"]["schema"];
        assert!(schema.is_object(), "{method} {path} {status} is not documented: {body}");
        let mut problems = Vec::new();
        conform(&doc, schema, body, "$", true, &mut problems);
        assert!(problems.is_empty(), "{method} {path} {status}: {problems:?} in {body}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn the_metrics_move_during_an_order() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(1).await;
    assert_eq!(app.order(v, 1).await.0, StatusCode::ACCEPTED);
    assert_eq!(code(&app.order(v, 2).await.1), "sold_out");
    let scrape = || async {
        let resp = app.client.get(format!("{}/metrics", app.addr)).send().await.unwrap();
        resp.text().await.unwrap()
    };
    let text = eventually(Duration::from_secs(10), || async {
        let text = scrape().await;
        (metric(&text, "seckill_orders_persisted_total{result=\"created\"}") == 1.0).then_some(text)
    })
    .await
    .expect("the persisted order is counted");
    assert_eq!(metric(&text, "seckill_order_requests_total{outcome=\"accepted\"}"), 1.0);
    assert_eq!(metric(&text, "seckill_order_requests_total{outcome=\"sold_out\"}"), 1.0);
    assert_eq!(metric(&text, "seckill_relay_published_orders_total"), 1.0);
    assert_eq!(metric(&text, "seckill_relay_confirms_total{result=\"ack\"}"), 1.0);
    assert_eq!(metric(&text, "seckill_reserve_lua_seconds_count"), 2.0);
    // The backlog gauge is refreshed every few seconds in the background.
    let drained = eventually(Duration::from_secs(15), || async {
        (metric(&scrape().await, "seckill_outbox_backlog") == 0.0).then_some(())
    })
    .await;
    assert!(drained.is_some(), "the outbox backlog gauge comes back to 0");
    assert!(text.contains(
        "seckill_http_request_seconds_count{method=\"POST\",route=\"/api/v1/vouchers/{id}/orders\",status=\"202\"} 1"
    ));
    assert!(metric(&text, "seckill_worker_persist_seconds_count") >= 1.0);

    // Unknown paths, also under /api/v1/, share one label.
    for path in ["/api/v1/nope-1", "/api/v1/nope-2", "/elsewhere"] {
        assert_eq!(app.get(path, None).await.0, StatusCode::NOT_FOUND);
    }
    // The page is rendered at most once a second: the next one counts them.
    tokio::time::sleep(seckill::metrics::RENDER_EVERY + Duration::from_millis(50)).await;
    let text = app
        .client
        .get(format!("{}/metrics", app.addr))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        !text.contains("nope-") && !text.contains("elsewhere"),
        "unknown paths must not become labels"
    );
    assert_eq!(
        metric(
            &text,
            "seckill_http_request_seconds_count{method=\"GET\",route=\"unmatched\",status=\"404\"}"
        ),
        3.0
    );
    app.shutdown().await;
}
