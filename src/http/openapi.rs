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
use crate::voucher::view::{PublicVoucher, SaleStats, ShardStats, TopUpView, ToppedUp, VoucherList, VoucherWithStats};
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
        ErrorBody, ErrorDetail, Voucher, FlashSale, NewVoucher, AddStock, VoucherWithStats, SaleStats, ShardStats,
        PublicVoucher, VoucherList, ToppedUp, TopUpView, Audit, RedisBooks, InFlight, PostgresBooks, Checks, Accepted, Order,
        Rule, RuleRequest, NextRequest, NextValues,
    )),
    modifiers(&BearerAuth),
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

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/api-docs/openapi.json", web::get().to(openapi_json))
        .route("/api-docs/", web::get().to(index))
        .route("/api-docs", web::get().to(index))
        .route("/api-docs/swagger-ui-bundle.js", web::get().to(bundle))
        .route("/api-docs/swagger-ui.css", web::get().to(css));
}
