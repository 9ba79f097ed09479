//! The OpenAPI 3 document (`GET /api-docs/openapi.json`), generated from the
//! handlers' `#[utoipa::path]` annotations and the types they name, and a Swagger UI
//! page (`GET /api-docs/`) whose assets are vendored in `static/swagger-ui/`.
//!
//! Every schema is a type a handler serialises, or parses a request body into: no
//! look-alikes kept for the document (`tests/api/docs/` checks real responses
//! against it). The responses endpoints share (errors, shedding) are defined once
//! below, as `IntoResponses` types that are never built, and each handler's
//! `#[utoipa::path]` lists them by name.
use super::doc_headers::RequestIdHeader;
use super::doc_links::{IdParams, Links};
use super::error::{ErrorBody, ErrorDetail};
use super::responses::{RateLimited, Unavailable};
use crate::numbers::body::{NextRequest, NextValues, RuleRequest};
use crate::numbers::Rule;
use crate::ordering::outbox::{RelayState, ShardRelay};
use crate::ordering::{Accepted, Order};
use crate::reports::view::{LiveSale, OrderCounts};
use crate::reports::{Audit, Checks, InFlight, PostgresBooks, RedisBooks};
use crate::sales::model::AddStock;
use crate::sales::view::{
    PublicVoucher, SaleStats, ShardStats, TopUpView, ToppedUp, VoucherList, VoucherPage, VoucherWithStats,
};
use crate::sales::{FlashSale, NewVoucher, Voucher};
use actix_web::http::header;
use actix_web::{web, HttpResponse};
use std::sync::LazyLock;
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

#[derive(OpenApi)]
#[openapi(
    info(title = "seckill", description = "Flash-sale voucher ordering backend. Errors: {\"error\": {\"code\", \"message\"}}. 64-bit ids are decimal strings."),
    paths(
        super::vouchers::create,
        super::vouchers::admin_get,
        super::stock::add_stock,
        super::vouchers::admin_audit,
        super::sales::admin_list,
        super::sales::pause,
        super::sales::resume,
        super::sales::live,
        super::repair::redis_state,
        super::vouchers::list,
        super::vouchers::public_get,
        super::orders::place,
        super::challenge::challenge,
        super::waiting::join_queue,
        super::waiting::queue_me,
        super::raffle::enter_raffle,
        super::raffle::raffle_me,
        super::raffle::raffle_summary,
        super::raffle::raffle_entries,
        super::raffle::submit_beacon,
        super::admit_admin::admission_view,
        super::admit_admin::set_admit_rate,
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
        super::console::page,
    ),
    components(schemas(
        ErrorBody, ErrorDetail, Voucher, FlashSale, NewVoucher, AddStock, VoucherWithStats, SaleStats, ShardStats,
        PublicVoucher, VoucherList, VoucherPage, LiveSale, OrderCounts, RelayState, ShardRelay, ToppedUp, TopUpView, Audit, RedisBooks, InFlight, PostgresBooks, Checks, Accepted, Order,
        Rule, RuleRequest, NextRequest, NextValues, super::repair::RedisState, super::repair::SaleAvailability, super::repair::WorkerSeen,
        crate::admission::Mode, crate::admission::pow::Challenge, super::waiting::QueueStatus, super::raffle::MyEntry,
        crate::admission::raffle::Summary, crate::admission::raffle::PublicEntry, super::raffle::EntryPage,
        super::raffle::BeaconRound, crate::admission::beacon::Beacon, crate::admission::beacon::Chain,
        crate::admission::advance::Frontier, crate::admission::advance::Admitted, crate::admission::raffle::Winner,
        super::admit_admin::AdmissionView, super::admit_admin::SetRate, super::admit_admin::QueueView, super::admit_admin::RaffleView,
    )),
    modifiers(&BearerAuth, &IdParams, &Links, &RequestIdHeader),
)]
pub struct ApiDoc;

/// The OpenAPI document of every route.
#[utoipa::path(get, path = "/api-docs/openapi.json", tag = "docs",
    responses((status = 200, description = "OpenAPI 3 document"), RateLimited, Unavailable))]
pub async fn openapi_json() -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(document())
}

/// The document, serialised once per process: it cannot change while the
/// process runs, and building it (every schema, then the modifiers) costs far
/// more than sending it, which anyone may ask for as often as they like.
pub fn document() -> &'static [u8] {
    static DOCUMENT: LazyLock<Vec<u8>> =
        LazyLock::new(|| serde_json::to_vec(&ApiDoc::openapi()).expect("the OpenAPI document serialises"));
    &DOCUMENT
}

/// The Swagger UI page. Its one script of its own is a file (`init.js`), not
/// inline, so that the page runs under a CSP that allows only this origin's
/// files: a script injected into the page (through the document, say) does not run.
const INDEX: &str = r##"<!doctype html>
<html><head><meta charset="utf-8"><title>seckill API</title>
<link rel="stylesheet" href="/api-docs/swagger-ui.css"></head>
<body><div id="swagger-ui"></div>
<script src="/api-docs/swagger-ui-bundle.js"></script>
<script src="/api-docs/init.js"></script>
</body></html>"##;

const INIT: &str = r##"window.ui = SwaggerUIBundle({url: "/api-docs/openapi.json", dom_id: "#swagger-ui"});
"##;

/// This origin's scripts, styles and document only. Swagger UI sets some styles
/// from its script (style attributes it renders: `'unsafe-inline'` for styles,
/// never for scripts) and draws icons from `data:` images.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

async fn index() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header((header::CONTENT_SECURITY_POLICY, CSP))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .body(INDEX)
}

async fn init() -> HttpResponse {
    HttpResponse::Ok().content_type("application/javascript").body(INIT)
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
pub const UI_PAGES: [&str; 5] = [
    "/api-docs/",
    "/api-docs",
    "/api-docs/swagger-ui-bundle.js",
    "/api-docs/swagger-ui.css",
    "/api-docs/init.js",
];

pub fn configure(cfg: &mut web::ServiceConfig) {
    let [index_slash, index_bare, js, style, init_js] = UI_PAGES;
    cfg.route("/api-docs/openapi.json", web::get().to(openapi_json))
        .route(index_slash, web::get().to(index))
        .route(index_bare, web::get().to(index))
        .route(js, web::get().to(bundle))
        .route(style, web::get().to(css))
        .route(init_js, web::get().to(init));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::doc_links::LINKS;

    /// Every link rule finds its operation and at least one target, and every
    /// link names an operation of the document and a parameter it has.
    /// The document is built once: every call hands out the same bytes.
    #[test]
    fn the_document_is_built_once() {
        assert!(std::ptr::eq(document(), document()));
        let doc: serde_json::Value = serde_json::from_slice(document()).unwrap();
        assert_eq!(doc, serde_json::to_value(ApiDoc::openapi()).unwrap());
    }

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
        let mut ids: Vec<&str> = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|item| item.as_object().unwrap().values())
            .filter_map(|op| op["operationId"].as_str())
            .collect();
        let all = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(
            ids.len(),
            all,
            "operationIds must be unique (links name operations by id)"
        );
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
