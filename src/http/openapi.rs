//! The OpenAPI 3 document (`GET /api-docs/openapi.json`), generated from the
//! handlers' `#[utoipa::path]` annotations and the types they name, and a Swagger UI
//! page (`GET /api-docs/`) whose assets are vendored in `static/swagger-ui/`.
//!
//! Every schema is a type a handler serialises, or parses a request body into: no
//! look-alikes kept for the document (`tests/api/docs.rs` checks real responses
//! against it). The responses endpoints share (errors, shedding) are defined once
//! below, as `IntoResponses` types that are never built, and each handler's
//! `#[utoipa::path]` lists them by name.
use super::error::{ErrorBody, ErrorDetail};
use super::responses::{RateLimited, Unavailable};
use crate::order::{Accepted, Order};
use crate::sequence::body::{NextRequest, NextValues, RuleRequest};
use crate::sequence::Rule;
use crate::voucher::audit::{Audit, Checks, InFlight, PostgresBooks, RedisBooks};
use crate::voucher::model::AddStock;
use crate::voucher::view::{PublicVoucher, SaleStats, TopUpView, ToppedUp, VoucherList, VoucherWithStats};
use crate::voucher::{FlashSale, NewVoucher, Voucher};
use actix_web::{web, HttpResponse};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
    }
}

/// OpenAPI links: where the ids an answer carries can be used next (a created
/// voucher's in every `/vouchers/{id}` operation, admin or public, a placed order's
/// in every `/orders/{order_id}` one, a rule's name in its `next`). Drawn from the
/// paths themselves, so that an operation added under those paths gets its links
/// without an edit here. Clients and tools (schemathesis's stateful phase) follow
/// them.
struct Links;

/// An id an answer carries, and the operations that take it.
struct LinkRule {
    /// The operation whose answer carries the id (POST or PUT), and the status.
    method: &'static str,
    path: &'static str,
    status: &'static str,
    /// The field of the answer.
    field: &'static str,
    /// The operations at these paths (and below a path that ends in a parameter).
    to: &'static [&'static str],
    /// Their parameter that takes it.
    param: &'static str,
}

const LINKS: [LinkRule; 4] = [
    LinkRule {
        method: "post",
        path: "/api/v1/admin/vouchers",
        status: "201",
        field: "id",
        to: &["/api/v1/admin/vouchers/{id}", "/api/v1/vouchers/{id}"],
        param: "id",
    },
    LinkRule {
        method: "post",
        path: "/api/v1/admin/vouchers",
        status: "201",
        field: "shop_id",
        to: &["/api/v1/vouchers"],
        param: "shop_id",
    },
    LinkRule {
        method: "post",
        path: "/api/v1/vouchers/{id}/orders",
        status: "202",
        field: "order_id",
        to: &["/api/v1/orders/{order_id}"],
        param: "order_id",
    },
    LinkRule {
        method: "put",
        path: "/api/v1/admin/sequences/{name}",
        status: "200",
        field: "name",
        to: &["/api/v1/sequences/{name}"],
        param: "name",
    },
];

impl Modify for Links {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::extensions::Extensions;
        use utoipa::openapi::link::LinkBuilder;
        for rule in &LINKS {
            // Every operation at a prefix, and below one that ends in a parameter
            // (`/api/v1/vouchers/{id}/orders` is the voucher's; `/api/v1/vouchers`
            // names only the list).
            let targets: Vec<String> = doc
                .paths
                .paths
                .iter()
                .filter(|(path, _)| {
                    rule.to
                        .iter()
                        .any(|p| path.as_str() == *p || (p.ends_with('}') && path.starts_with(&format!("{p}/"))))
                })
                .flat_map(|(_, item)| {
                    [&item.get, &item.put, &item.post, &item.delete, &item.patch]
                        .into_iter()
                        .flatten()
                        .filter_map(|op| op.operation_id.clone())
                })
                .collect();
            // A rule that finds no operation is caught by the test below.
            let Some(item) = doc.paths.paths.get_mut(rule.path) else {
                continue;
            };
            let op = match rule.method {
                "put" => &mut item.put,
                _ => &mut item.post,
            };
            let Some(op) = op else {
                continue;
            };
            let Some(utoipa::openapi::RefOr::T(response)) = op.responses.responses.get_mut(rule.status) else {
                continue;
            };
            for operation_id in targets {
                // utoipa 5.5 writes `Link::operation_id` as "operation_id", not
                // OpenAPI's "operationId"; the extensions map is written as given.
                let key = Extensions::from_iter([("operationId", operation_id.clone())]);
                let link = LinkBuilder::new()
                    .extensions(Some(key))
                    .parameter(rule.param, format!("$response.body#/{}", rule.field))
                    .build();
                response.links.insert(operation_id, link.into());
            }
        }
    }
}

/// Ids in paths and query strings are read as decimal digits ([`crate::id::parse_str`]):
/// every `i64` parameter (the handlers name ids so, `("id" = i64, Path, ...)`) is
/// documented as such a string, so that no tool sends `42.0` or `4.2e1`.
struct IdParams;

impl Modify for IdParams {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::schema::{KnownFormat, SchemaFormat};
        for item in doc.paths.paths.values_mut() {
            let ops = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for op in ops.into_iter().flatten() {
                for param in op.parameters.iter_mut().flatten() {
                    let is_i64 = matches!(&param.schema, Some(utoipa::openapi::RefOr::T(utoipa::openapi::Schema::Object(o)))
                        if o.format == Some(SchemaFormat::KnownFormat(KnownFormat::Int64)));
                    if is_i64 {
                        param.schema = Some(crate::id::url_schema().into());
                    }
                }
            }
        }
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "seckill", description = "Flash-sale voucher ordering backend. Errors: {\"error\": {\"code\", \"message\"}}. 64-bit ids are decimal strings."),
    paths(
        super::vouchers::create,
        super::vouchers::admin_get,
        super::vouchers::add_stock,
        super::vouchers::admin_audit,
        super::vouchers::list,
        super::vouchers::public_get,
        super::orders::place,
        super::orders::get,
        super::orders::mine,
        super::lifecycle::pay,
        super::lifecycle::cancel,
        super::sequences::put_rule,
        super::sequences::next,
        crate::http::health::live,
        crate::http::health::ready,
        crate::http::health::metrics,
        openapi_json,
    ),
    components(schemas(
        ErrorBody, ErrorDetail, Voucher, FlashSale, NewVoucher, AddStock, VoucherWithStats, SaleStats,
        PublicVoucher, VoucherList, ToppedUp, TopUpView, Audit, RedisBooks, InFlight, PostgresBooks, Checks, Accepted, Order,
        Rule, RuleRequest, NextRequest, NextValues,
    )),
    modifiers(&BearerAuth, &IdParams, &Links),
)]
pub struct ApiDoc;

/// The OpenAPI document of every route.
#[utoipa::path(get, path = "/api-docs/openapi.json", tag = "docs",
    responses((status = 200, description = "OpenAPI 3 document"), RateLimited, Unavailable))]
pub async fn openapi_json() -> HttpResponse {
    HttpResponse::Ok().json(ApiDoc::openapi())
}

const INDEX: &str = r##"<!doctype html>
<html><head><meta charset="utf-8"><title>seckill API</title>
<link rel="stylesheet" href="/api-docs/swagger-ui.css"></head>
<body><div id="swagger-ui"></div>
<script src="/api-docs/swagger-ui-bundle.js"></script>
<script>window.ui = SwaggerUIBundle({url: "/api-docs/openapi.json", dom_id: "#swagger-ui"});</script>
</body></html>"##;

async fn index() -> HttpResponse {
    HttpResponse::Ok().content_type("text/html; charset=utf-8").body(INDEX)
}

async fn bundle() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/javascript")
        .body(&include_bytes!("../../static/swagger-ui/swagger-ui-bundle.js")[..])
}

async fn css() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/css")
        .body(&include_bytes!("../../static/swagger-ui/swagger-ui.css")[..])
}

/// The Swagger UI's pages and assets: GET routes the document does not describe.
pub const UI_PAGES: [&str; 4] = [
    "/api-docs/",
    "/api-docs",
    "/api-docs/swagger-ui-bundle.js",
    "/api-docs/swagger-ui.css",
];

pub fn configure(cfg: &mut web::ServiceConfig) {
    let [index_slash, index_bare, js, style] = UI_PAGES;
    cfg.route("/api-docs/openapi.json", web::get().to(openapi_json))
        .route(index_slash, web::get().to(index))
        .route(index_bare, web::get().to(index))
        .route(js, web::get().to(bundle))
        .route(style, web::get().to(css));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every link rule finds its operation and at least one target, and every
    /// link names an operation of the document and a parameter it has.
    #[test]
    fn every_link_rule_links_existing_operations() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let mut operations = std::collections::BTreeMap::new();
        for item in doc["paths"].as_object().unwrap().values() {
            for op in item.as_object().unwrap().values() {
                let params: Vec<String> = op["parameters"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| p["name"].as_str().unwrap().to_owned())
                    .collect();
                operations.insert(op["operationId"].as_str().unwrap().to_owned(), params);
            }
        }
        for rule in &LINKS {
            let links = &doc["paths"][rule.path][rule.method]["responses"][rule.status]["links"];
            let links = links
                .as_object()
                .unwrap_or_else(|| panic!("no links from {} {}", rule.method, rule.path));
            assert!(
                links.values().any(|l| l["parameters"][rule.param].is_string()),
                "{}",
                rule.path
            );
            for (name, link) in links {
                let target = link["operationId"].as_str().unwrap();
                let params = &operations[target];
                for param in link["parameters"].as_object().unwrap().keys() {
                    assert!(params.contains(param), "link {name}: {target} has no parameter {param}");
                }
            }
        }
    }
}
