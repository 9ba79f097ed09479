//! The API's documentation and metrics: the OpenAPI document covers every
//! endpoint of the contract, Swagger UI is served from vendored assets, and the
//! metrics move with an order.
use crate::helpers::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;

/// Every endpoint of CONTRACT.md, as (method, path).
const CONTRACT: [(&str, &str); 20] = [
    ("post", "/api/v1/admin/vouchers"),
    ("get", "/api/v1/admin/vouchers/{id}"),
    ("post", "/api/v1/admin/vouchers/{id}/stock"),
    ("get", "/api/v1/admin/vouchers/{id}/audit"),
    ("post", "/api/v1/admin/vouchers/{id}/pause"),
    ("post", "/api/v1/admin/vouchers/{id}/resume"),
    ("get", "/admin/"),
    ("get", "/api/v1/vouchers"),
    ("get", "/api/v1/vouchers/{id}"),
    ("post", "/api/v1/vouchers/{id}/orders"),
    ("get", "/api/v1/orders/{order_id}"),
    ("get", "/api/v1/vouchers/{id}/orders/mine"),
    ("post", "/api/v1/orders/{order_id}/pay"),
    ("post", "/api/v1/orders/{order_id}/cancel"),
    ("put", "/api/v1/admin/sequences/{name}"),
    ("post", "/api/v1/sequences/{name}/next"),
    ("get", "/health/live"),
    ("get", "/health/ready"),
    ("get", "/metrics"),
    ("get", "/api-docs/openapi.json"),
];

/// Endpoints beyond the contract: for the admin console, and for operators of a
/// Redis repair.
const EXTRAS: [(&str, &str); 4] = [
    ("get", "/api/v1/admin/vouchers"),
    ("get", "/api/v1/admin/vouchers/{id}/live"),
    ("get", "/api/v1/admin/redis"),
    ("post", "/api/v1/admin/redis/abandon"),
];

#[tokio::test]
async fn the_openapi_document_covers_every_contract_route() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let (status, doc) = app.get("/api-docs/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for (method, path) in CONTRACT.into_iter().chain(EXTRAS) {
        assert!(
            doc["paths"][path][method].is_object(),
            "{method} {path} is missing from the OpenAPI document"
        );
    }
    let documented: usize = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|p| p.as_object().unwrap().len())
        .sum();
    assert_eq!(
        documented,
        CONTRACT.len() + EXTRAS.len(),
        "no undocumented extras, no gaps"
    );

    let page = app.client.get(format!("{}/api-docs/", app.addr)).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    // A strict CSP: only this origin's scripts, none inline (the page has none).
    let csp = page.headers()["content-security-policy"].to_str().unwrap().to_owned();
    let script_src = csp
        .split(';')
        .map(str::trim)
        .find(|d| d.starts_with("script-src "))
        .unwrap_or_else(|| panic!("no script-src in {csp}"));
    assert_eq!(script_src, "script-src 'self'", "{csp}");
    assert!(
        csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    let html = page.text().await.unwrap();
    assert!(html.contains("/api-docs/swagger-ui-bundle.js"));
    assert_eq!(
        html.matches("<script").count(),
        html.matches("<script src=\"/api-docs/").count(),
        "no inline script: {html}"
    );
    let init = app
        .client
        .get(format!("{}/api-docs/init.js", app.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(init.status(), StatusCode::OK);
    assert!(init.text().await.unwrap().contains("SwaggerUIBundle"));
    let js = app
        .client
        .get(format!("{}/api-docs/swagger-ui-bundle.js", app.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(js.status(), StatusCode::OK);
    assert!(js.bytes().await.unwrap().len() > 100_000);
    app.shutdown().await;
}

/// A known path asked with a method it does not take answers 405
/// `method_not_allowed` with `Allow` naming exactly the methods the document lists
/// for it; each of those the router really takes (the answer is the handler's, not
/// the router's "no route"). Unknown paths stay 404.
#[tokio::test]
async fn a_known_path_with_another_method_is_405_with_allow() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let (_, doc) = app.get("/api-docs/openapi.json", None).await;
    let admin = app.admin();
    let methods = ["GET", "PUT", "POST", "DELETE", "PATCH", "TRACE", "OPTIONS", "HEAD"];
    let mut paths: Vec<(String, BTreeSet<String>)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(path, item)| {
            let listed = item.as_object().unwrap().keys().map(|m| m.to_uppercase()).collect();
            (path.clone(), listed)
        })
        .collect();
    paths.push(("/api-docs/".to_owned(), BTreeSet::from(["GET".to_owned()])));
    for (template, listed) in &paths {
        let path = template
            .replace("{id}", "1")
            .replace("{order_id}", "1")
            .replace("{name}", "order");
        for method in methods {
            let resp = app
                .client
                .request(
                    reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
                    format!("{}{path}", app.addr),
                )
                .bearer_auth(&admin)
                .send()
                .await
                .unwrap();
            let status = resp.status();
            let allow = resp.headers().get("allow").map(|v| v.to_str().unwrap().to_owned());
            let body: Value = resp.json().await.unwrap_or(Value::Null);
            if listed.contains(method) {
                assert!(
                    status != StatusCode::METHOD_NOT_ALLOWED && body["error"]["code"] != "not_found",
                    "{method} {path} is documented but not routed: {status} {body}"
                );
                continue;
            }
            assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}: {body}");
            let allowed: BTreeSet<String> = allow
                .unwrap_or_else(|| panic!("{method} {path}: 405 without Allow"))
                .split(',')
                .map(|m| m.trim().to_owned())
                .collect();
            assert_eq!(&allowed, listed, "{method} {path}: Allow");
            if method != "HEAD" {
                assert_eq!(code(&body), "method_not_allowed", "{method} {path}: {body}");
            }
        }
    }
    for (method, path) in [
        ("TRACE", "/api/v1/nope"),
        ("GET", "/api/v1/vouchers/1/nope"),
        ("POST", "/elsewhere"),
    ] {
        let resp = app
            .client
            .request(
                reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
                format!("{}{path}", app.addr),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{method} {path}");
        assert!(resp.headers().get("allow").is_none());
    }
    app.shutdown().await;
}

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

/// Checks `v` against an OpenAPI 3.1 schema: `$ref`, `allOf`, `oneOf`, `type`,
/// `enum`, `required`, `properties` (and no property the schema does not name),
/// `items`, bounds and lengths. Enough for the schemas utoipa writes; `pattern` is
/// left out (no regex engine here).
fn conform(doc: &Value, schema: &Value, v: &Value, at: &str, whole: bool, problems: &mut Vec<String>) {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.trim_start_matches("#/components/schemas/");
        return conform(doc, &doc["components"]["schemas"][name], v, at, whole, problems);
    }
    if whole && v.is_object() {
        let mut named = BTreeSet::new();
        property_names(doc, schema, &mut named);
        for key in v.as_object().unwrap().keys().filter(|k| !named.contains(*k)) {
            problems.push(format!("{at}.{key} is not in the schema"));
        }
    }
    for part in schema["allOf"].as_array().into_iter().flatten() {
        conform(doc, part, v, at, false, problems);
    }
    if let Some(choices) = schema["oneOf"].as_array() {
        let fits = choices
            .iter()
            .filter(|c| {
                let mut p = Vec::new();
                conform(doc, c, v, at, true, &mut p);
                p.is_empty()
            })
            .count();
        if fits != 1 {
            problems.push(format!("{at} fits {fits} of oneOf"));
        }
    }
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    if !types.is_empty()
        && !types
            .iter()
            .any(|t| *t == kind || (*t == "number" && kind == "integer"))
    {
        problems.push(format!("{at} is {kind}, not {types:?}"));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(v) {
            problems.push(format!("{at} = {v} is not one of {allowed:?}"));
        }
    }
    if let (Some(n), Some(min)) = (v.as_f64(), schema["minimum"].as_f64()) {
        if n < min {
            problems.push(format!("{at} = {n} < minimum {min}"));
        }
    }
    if let (Some(n), Some(max)) = (v.as_f64(), schema["maximum"].as_f64()) {
        if n > max {
            problems.push(format!("{at} = {n} > maximum {max}"));
        }
    }
    if let (Some(s), Some(min)) = (v.as_str(), schema["minLength"].as_u64()) {
        if (s.chars().count() as u64) < min {
            problems.push(format!("{at} is shorter than {min}"));
        }
    }
    if let (Some(s), Some(max)) = (v.as_str(), schema["maxLength"].as_u64()) {
        if s.chars().count() as u64 > max {
            problems.push(format!("{at} is longer than {max}"));
        }
    }
    if let Some(obj) = v.as_object() {
        for name in schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !obj.contains_key(name) {
                problems.push(format!("{at}.{name} is required"));
            }
        }
        for (name, sub) in schema["properties"].as_object().into_iter().flatten() {
            if let Some(value) = obj.get(name) {
                conform(doc, sub, value, &format!("{at}.{name}"), true, problems);
            }
        }
    }
    if let (Some(items), Some(schema)) = (v.as_array(), schema.get("items")) {
        for (i, item) in items.iter().enumerate() {
            conform(doc, schema, item, &format!("{at}[{i}]"), true, problems);
        }
    }
}

/// The properties a schema names, through `$ref`, `allOf` and `oneOf` (a nullable
/// object is `oneOf: [null, object]`).
fn property_names(doc: &Value, schema: &Value, names: &mut BTreeSet<String>) {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.trim_start_matches("#/components/schemas/");
        return property_names(doc, &doc["components"]["schemas"][name], names);
    }
    names.extend(
        schema["properties"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k.clone()),
    );
    for part in schema["allOf"].as_array().into_iter().flatten() {
        property_names(doc, part, names);
    }
    for part in schema["oneOf"].as_array().into_iter().flatten() {
        property_names(doc, part, names);
    }
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
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
