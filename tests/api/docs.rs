//! Issue 8: the OpenAPI document covers the contract, Swagger UI is served from
//! vendored assets, and the metrics move with an order.
use crate::helpers::*;
use reqwest::StatusCode;
use std::time::Duration;

/// Every endpoint of CONTRACT.md, as (method, path).
const CONTRACT: [(&str, &str); 16] = [
    ("post", "/api/v1/admin/vouchers"),
    ("get", "/api/v1/admin/vouchers/{id}"),
    ("post", "/api/v1/admin/vouchers/{id}/stock"),
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

#[tokio::test]
async fn the_openapi_document_covers_every_contract_route() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let (status, doc) = app.get("/api-docs/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for (method, path) in CONTRACT {
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
    assert_eq!(documented, CONTRACT.len(), "no undocumented extras, no gaps");

    let page = app.client.get(format!("{}/api-docs/", app.addr)).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().await.unwrap().contains("/api-docs/swagger-ui-bundle.js"));
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
    let text = eventually(Duration::from_secs(10), || async {
        let text = app
            .client
            .get(format!("{}/metrics", app.addr))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        (metric(&text, "seckill_orders_persisted_total{result=\"created\"}") == 1.0).then_some(text)
    })
    .await
    .expect("the persisted order is counted");
    assert_eq!(metric(&text, "seckill_order_requests_total{outcome=\"accepted\"}"), 1.0);
    assert_eq!(metric(&text, "seckill_order_requests_total{outcome=\"sold_out\"}"), 1.0);
    assert_eq!(metric(&text, "seckill_relay_published_orders_total"), 1.0);
    assert_eq!(metric(&text, "seckill_relay_confirms_total{result=\"ack\"}"), 1.0);
    assert_eq!(metric(&text, "seckill_reserve_lua_seconds_count"), 2.0);
    assert_eq!(metric(&text, "seckill_outbox_backlog"), 0.0);
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
