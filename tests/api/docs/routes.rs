//! docs: `the_openapi_document_covers_every_contract_route`,
//! `a_known_path_with_another_method_is_405_with_allow`.
use super::*;

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
