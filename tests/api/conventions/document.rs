//! conventions: `the_document_declares_the_headers`.
use super::*;

/// The document declares the new headers: Location on 201 and 202, X-Request-Id
/// on every answer, Idempotency-Key on the admin's create and top-up.
#[tokio::test]
async fn the_document_declares_the_headers() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let (_, doc) = app.get("/api-docs/openapi.json", None).await;
    let paths = &doc["paths"];
    assert!(paths["/api/v1/admin/vouchers"]["post"]["responses"]["201"]["headers"]["Location"].is_object());
    assert!(paths["/api/v1/vouchers/{id}/orders"]["post"]["responses"]["202"]["headers"]["Location"].is_object());
    for (path, item) in paths.as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for (status, response) in op["responses"].as_object().unwrap() {
                assert!(
                    response["headers"]["X-Request-Id"].is_object(),
                    "{method} {path} {status} lacks X-Request-Id"
                );
            }
        }
    }
    for path in ["/api/v1/admin/vouchers", "/api/v1/admin/vouchers/{id}/stock"] {
        let params = paths[path]["post"]["parameters"].as_array().unwrap();
        assert!(
            params
                .iter()
                .any(|p| p["name"] == "Idempotency-Key" && p["in"] == "header"),
            "{path}"
        );
        assert!(paths[path]["post"]["responses"]["422"].is_object(), "{path}");
    }
    app.shutdown().await;
}
