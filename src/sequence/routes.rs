//! `PUT /api/v1/admin/sequences/{name}` and `POST /api/v1/sequences/{name}/next`.
use super::rule::{self, Rule};
use crate::app::AppState;
use crate::http::auth::{Admin, ServiceCaller};
use crate::http::{id, ApiError};
use crate::voucher::model::whole;
use actix_web::{web, HttpResponse};
use serde_json::{json, Value};

pub const MAX_COUNT: i64 = 1000;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/admin/sequences/{name}", web::put().to(put_rule))
        .route("/sequences/{name}/next", web::post().to(next));
}

fn str_field<'a>(body: &'a Value, field: &str) -> Result<&'a str, ApiError> {
    match body.get(field) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(ApiError::validation(field, "is required")),
        Some(other) => Err(ApiError::validation(
            field,
            format!("must be a string, got {}", id::kind(other)),
        )),
    }
}

#[utoipa::path(put, path = "/api/v1/admin/sequences/{name}", tag = "sequences", security(("bearer" = [])), params(("name" = String, Path)), request_body = crate::http::openapi::RuleDoc, responses((status = 200, description = "the rule", body = crate::http::openapi::RuleDoc), (status = 400, description = "validation_failed / invalid_json", body = crate::http::openapi::ErrorBody), (status = 401, description = "unauthorized", body = crate::http::openapi::ErrorBody), (status = 403, description = "forbidden", body = crate::http::openapi::ErrorBody)))]
#[tracing::instrument(skip_all, fields(rule = %path))]
pub async fn put_rule(
    state: web::Data<AppState>,
    _admin: Admin,
    path: web::Path<String>,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let width = match body.get("min_width") {
        None | Some(Value::Null) => return Err(ApiError::validation("min_width", "is required")),
        Some(v) => whole(v, "min_width", i64::MIN, i64::MAX)?,
    };
    let time_zone = match body.get("time_zone") {
        None | Some(Value::Null) => state.settings.time_zone.name(),
        Some(_) => str_field(&body, "time_zone")?,
    };
    let rule = Rule::parse_parts(
        &path,
        str_field(&body, "prefix")?,
        str_field(&body, "date_format")?,
        width,
        time_zone,
    )?;
    rule::upsert(&state.pg, &rule).await?;
    Ok(HttpResponse::Ok().json(&rule))
}

#[utoipa::path(post, path = "/api/v1/sequences/{name}/next", tag = "sequences", security(("bearer" = [])), params(("name" = String, Path)), request_body = crate::http::openapi::NextRequest, responses((status = 200, body = crate::http::openapi::NextValues), (status = 400, description = "validation_failed / invalid_json", body = crate::http::openapi::ErrorBody), (status = 401, description = "unauthorized", body = crate::http::openapi::ErrorBody), (status = 403, description = "forbidden", body = crate::http::openapi::ErrorBody), (status = 404, description = "sequence_not_found", body = crate::http::openapi::ErrorBody)))]
#[tracing::instrument(skip_all, fields(rule = %path))]
pub async fn next(
    state: web::Data<AppState>,
    _caller: ServiceCaller,
    path: web::Path<String>,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let tenant = match body.get("tenant_id") {
        None | Some(Value::Null) => return Err(ApiError::validation("tenant_id", "is required")),
        Some(v) => id::parse_value(v).map_err(|e| ApiError::validation("tenant_id", e))?,
    };
    let count = match body.get("count") {
        None | Some(Value::Null) => 1,
        Some(v) => whole(v, "count", 1, MAX_COUNT)?,
    };
    match state.sequences.next(&path, tenant, count as u64).await? {
        Some(values) => Ok(HttpResponse::Ok().json(json!({ "values": values }))),
        None => Err(ApiError::not_found(
            "sequence_not_found",
            format!("no sequence rule named {:?}", path.as_str()),
        )),
    }
}
