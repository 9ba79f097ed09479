//! The OpenAPI 3 document (`GET /api-docs/openapi.json`), generated from the
//! handlers' `#[utoipa::path]` annotations and the schemas below, and a Swagger UI
//! page (`GET /api-docs/`) whose assets are vendored in `static/swagger-ui/`.
use actix_web::{web, HttpResponse};
use serde::Serialize;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

/// Every error: `{"error": {"code": "<snake_case>", "message": "<for people>"}}`.
#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize, ToSchema)]
pub struct ErrorDetail {
    /// e.g. `validation_failed`, `sold_out`, `unauthorized`.
    pub code: String,
    pub message: String,
}

/// A voucher. Ids are decimal strings; flash-sale vouchers carry stock and window.
#[derive(Serialize, ToSchema)]
pub struct VoucherDoc {
    #[schema(example = "42")]
    pub id: String,
    pub shop_id: String,
    pub title: String,
    pub sub_title: Option<String>,
    pub rules: Option<String>,
    /// Cents.
    pub pay_value: i64,
    /// Cents.
    pub actual_value: i64,
    /// Everything put on sale (flash sales only).
    pub stock: Option<i32>,
    pub begin_at: Option<chrono::DateTime<chrono::Utc>>,
    pub end_at: Option<chrono::DateTime<chrono::Utc>>,
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// Live stock from Redis (public view of a flash sale).
    pub stock_remaining: Option<i64>,
    /// Admin view only.
    pub stats: Option<StatsDoc>,
}

#[derive(Serialize, ToSchema)]
pub struct StatsDoc {
    pub stock_remaining: Option<i64>,
    pub orders_accepted: i64,
    pub orders_persisted: i64,
}

/// `POST /api/v1/admin/vouchers`. Ids may be strings or numbers. A voucher with
/// `stock` is a flash sale and needs `begin_at` < `end_at`.
#[derive(Serialize, ToSchema)]
pub struct NewVoucherDoc {
    #[schema(value_type = String, example = "1")]
    pub shop_id: String,
    /// 1-255 characters.
    pub title: String,
    pub sub_title: Option<String>,
    pub rules: Option<String>,
    #[schema(minimum = 0)]
    pub pay_value: i64,
    #[schema(minimum = 0)]
    pub actual_value: i64,
    #[schema(minimum = 0, maximum = 100_000_000)]
    pub stock: Option<i64>,
    pub begin_at: Option<chrono::DateTime<chrono::FixedOffset>>,
    pub end_at: Option<chrono::DateTime<chrono::FixedOffset>>,
}

#[derive(Serialize, ToSchema)]
pub struct VoucherList {
    pub items: Vec<VoucherDoc>,
}

#[derive(Serialize, ToSchema)]
pub struct AddStock {
    #[schema(minimum = 1)]
    pub add: i64,
}

#[derive(Serialize, ToSchema)]
pub struct Accepted {
    pub order_id: String,
    /// Always `pending`.
    pub status: String,
}

/// An order. `order_no` is null until the order is persisted.
#[derive(Serialize, ToSchema)]
pub struct OrderDoc {
    pub order_id: String,
    pub order_no: Option<String>,
    pub voucher_id: String,
    pub user_id: String,
    /// pending, created, paid, cancelled or failed.
    pub status: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub paid_at: Option<chrono::DateTime<chrono::Utc>>,
    pub cancelled_at: Option<chrono::DateTime<chrono::Utc>>,
}

#[derive(Serialize, ToSchema)]
pub struct RuleDoc {
    #[schema(example = "YD")]
    pub prefix: String,
    /// yyyyMMdd, yyMMdd, yyyy-MM-dd, ... (must name year, month and day).
    #[schema(example = "yyMMdd")]
    pub date_format: String,
    #[schema(minimum = 1, maximum = 18)]
    pub min_width: i64,
    /// IANA zone; defaults to SECKILL_TIME_ZONE.
    pub time_zone: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct NextRequest {
    pub tenant_id: String,
    #[schema(minimum = 1, maximum = 1000)]
    pub count: Option<i64>,
}

#[derive(Serialize, ToSchema)]
pub struct NextValues {
    pub values: Vec<String>,
}

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
        crate::voucher::routes::create,
        crate::voucher::routes::admin_get,
        crate::voucher::routes::add_stock,
        crate::voucher::routes::list,
        crate::voucher::routes::public_get,
        crate::order::place::place,
        crate::order::status::get,
        crate::order::status::mine,
        crate::order::routes_lifecycle::pay,
        crate::order::routes_lifecycle::cancel,
        crate::sequence::routes::put_rule,
        crate::sequence::routes::next,
        crate::http::health::live,
        crate::http::health::ready,
        crate::http::health::metrics,
        openapi_json,
    ),
    components(schemas(ErrorBody, ErrorDetail, VoucherDoc, StatsDoc, NewVoucherDoc, VoucherList, AddStock, Accepted, OrderDoc, RuleDoc, NextRequest, NextValues)),
    modifiers(&BearerAuth),
)]
pub struct ApiDoc;

/// The OpenAPI document of every route.
#[utoipa::path(get, path = "/api-docs/openapi.json", tag = "docs", responses((status = 200, description = "OpenAPI 3 document")))]
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
