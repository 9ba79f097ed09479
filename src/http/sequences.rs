//! `PUT /api/v1/admin/sequences/{name}` and `POST /api/v1/sequences/{name}/next`.
use super::auth::{Admin, ServiceCaller};
use super::error::ApiError;
use super::error::ErrorBody;
use super::responses::{BadRequest, BodyRefused, Forbidden, RateLimited, Unauthorized, Unavailable};
use super::state::AppState;
use crate::numbers::body::{NextRequest, NextValues, RuleRequest};
use crate::numbers::rule::{self, Rule};
use actix_web::web;
use serde_json::Value;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/admin/sequences/{name}", web::put().to(put_rule))
        .route("/sequences/{name}/next", web::post().to(next));
}

#[utoipa::path(put, path = "/api/v1/admin/sequences/{name}", tag = "sequences", security(("bearer" = [])),
    params(("name" = String, Path, pattern = "^[a-z0-9_-]{1,64}$")), request_body = RuleRequest,
    responses((status = 200, description = "the rule", body = Rule),
        BadRequest, Unauthorized, Forbidden, BodyRefused, RateLimited, Unavailable))]
#[tracing::instrument(skip_all, fields(rule = %path))]
pub async fn put_rule(
    state: web::Data<AppState>,
    _admin: Admin,
    path: web::Path<String>,
    body: web::Json<Value>,
) -> Result<web::Json<Rule>, ApiError> {
    let req = RuleRequest::parse(&body)?;
    let time_zone = req
        .time_zone
        .as_deref()
        .unwrap_or(state.settings.sales.time_zone.name());
    let rule = Rule::parse_parts(&path, &req.prefix, &req.date_format, req.min_width, time_zone)?;
    state.sequences.set_rule(&rule).await?;
    Ok(web::Json(rule))
}

#[utoipa::path(post, path = "/api/v1/sequences/{name}/next", tag = "sequences", security(("bearer" = [])),
    params(("name" = String, Path, pattern = "^[a-z0-9_-]{1,64}$")), request_body = NextRequest,
    responses((status = 200, description = "consecutive numbers", body = NextValues),
        BadRequest, Unauthorized, Forbidden,
        (status = 404, description = "sequence_not_found", body = ErrorBody),
        BodyRefused, RateLimited, Unavailable))]
#[tracing::instrument(skip_all, fields(rule = %path))]
pub async fn next(
    state: web::Data<AppState>,
    _caller: ServiceCaller,
    path: web::Path<String>,
    body: web::Json<Value>,
) -> Result<web::Json<NextValues>, ApiError> {
    // No rule can have another name: say so before asking Postgres (which refuses
    // some, a NUL character for one).
    rule::check_name(&path)?;
    let req = NextRequest::parse(&body)?;
    match state.sequences.next(&path, req.tenant_id, req.count).await? {
        Some(values) => Ok(web::Json(NextValues { values })),
        None => Err(ApiError::not_found(
            "sequence_not_found",
            format!("no sequence rule named {:?}", path.as_str()),
        )),
    }
}
