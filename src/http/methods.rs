//! 405 `method_not_allowed`, with `Allow`, for a known path asked with a method it
//! does not take (HTTP: RFC 9110 §15.5.6); unknown paths stay 404.
//!
//! actix-web registers each `route(path, web::get()...)` as a resource guarded by
//! its method, so a request whose method no resource takes falls through to the
//! default service, the same as an unknown path. The routes and their methods are
//! read here from the OpenAPI document, which lists every route of the API
//! (`tests/api/docs/` holds it to the contract and checks each `Allow` against
//! the real router), plus the Swagger UI pages it does not describe.
use super::error::ApiError;
use super::openapi::{ApiDoc, UI_PAGES};
use actix_web::dev::ResourceDef;
use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use std::sync::OnceLock;
use utoipa::OpenApi;

/// Each known path pattern and the `Allow` value of its methods.
fn routes() -> &'static [(ResourceDef, String)] {
    static ROUTES: OnceLock<Vec<(ResourceDef, String)>> = OnceLock::new();
    ROUTES.get_or_init(|| {
        let doc = ApiDoc::openapi();
        let mut routes: Vec<(ResourceDef, String)> = doc
            .paths
            .paths
            .iter()
            .map(|(path, item)| {
                let methods: Vec<&str> = [
                    ("GET", item.get.is_some()),
                    ("PUT", item.put.is_some()),
                    ("POST", item.post.is_some()),
                    ("DELETE", item.delete.is_some()),
                    ("OPTIONS", item.options.is_some()),
                    ("HEAD", item.head.is_some()),
                    ("PATCH", item.patch.is_some()),
                    ("TRACE", item.trace.is_some()),
                ]
                .into_iter()
                .filter_map(|(m, on)| on.then_some(m))
                .collect();
                // OpenAPI's `{name}` templates are actix's patterns too.
                (ResourceDef::new(path.as_str()), methods.join(", "))
            })
            .collect();
        routes.extend(UI_PAGES.iter().map(|p| (ResourceDef::new(*p), "GET".to_owned())));
        routes
    })
}

/// The `Allow` value for `path` if it is a known route.
pub fn allowed(path: &str) -> Option<&'static str> {
    routes()
        .iter()
        .find(|(def, _)| def.is_match(path))
        .map(|(_, allow)| allow.as_str())
}

/// The answer to a request no route took: 405 with `Allow` for a known path, else
/// 404 `not_found`.
pub fn unrouted(method: &actix_web::http::Method, path: &str) -> HttpResponse {
    match allowed(path) {
        Some(allow) => {
            let mut resp = ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                format!("{path} takes {allow}, not {method}"),
            )
            .error_response();
            resp.headers_mut().insert(
                header::ALLOW,
                header::HeaderValue::from_str(allow).expect("method names are header-safe"),
            );
            resp
        }
        None => ApiError::not_found("not_found", format!("no route for {method} {path}")).error_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_paths_list_their_methods_and_unknown_ones_none() {
        assert_eq!(allowed("/api/v1/vouchers/42"), Some("GET"));
        assert_eq!(allowed("/api/v1/admin/vouchers"), Some("GET, POST"));
        assert_eq!(allowed("/api/v1/orders/7/pay"), Some("POST"));
        assert_eq!(allowed("/api-docs/"), Some("GET"));
        assert_eq!(allowed("/api/v1/vouchers/42/nope"), None);
        assert_eq!(allowed("/nope"), None);
    }
}
