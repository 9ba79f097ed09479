//! `POST /api/v1/orders/{order_id}/pay` and `.../cancel`: owner only, one request
//! of a shopper at a time across instances (per-user serialization).
use super::lifecycle::Canceller;
use super::status;
use crate::app::AppState;
use crate::http::auth::Caller;
use crate::http::{id, ApiError};
use actix_web::{web, HttpResponse};

fn order_id(raw: &str) -> Result<i64, ApiError> {
    id::parse_str(raw).map_err(|e| ApiError::validation("order_id", e))
}

/// Why the conditional update changed nothing: 404 if the caller cannot see the
/// order, else 409 `code` naming its state.
async fn refusal(state: &AppState, order_id: i64, caller: Caller, code: &'static str, verb: &str) -> ApiError {
    match status::find(state, order_id).await {
        Ok(Some(o)) if o.user_id == caller.user_id => {
            ApiError::conflict(code, format!("an order that is {} cannot be {verb}", o.status))
        }
        Ok(_) => ApiError::not_found("order_not_found", "no such order"),
        Err(e) => e,
    }
}

#[utoipa::path(post, path = "/api/v1/orders/{order_id}/pay", tag = "orders", security(("bearer" = [])), params(("order_id" = String, Path, description = "order id")), responses((status = 200, description = "status paid", body = crate::http::openapi::OrderDoc), (status = 400, description = "validation_failed / invalid_json", body = crate::http::openapi::ErrorBody), (status = 401, description = "unauthorized", body = crate::http::openapi::ErrorBody), (status = 404, description = "order_not_found", body = crate::http::openapi::ErrorBody), (status = 409, description = "order_not_payable, request_in_progress", body = crate::http::openapi::ErrorBody)))]
#[tracing::instrument(skip_all, fields(order_id = %path))]
pub async fn pay(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = order_id(&path)?;
    let state2 = state.clone();
    state
        .user_serializer
        .run(caller.user_id, async move {
            match state2.lifecycle.pay(id, caller.user_id).await? {
                Some(o) => Ok(HttpResponse::Ok().json(o)),
                None => Err(refusal(&state2, id, caller, "order_not_payable", "paid").await),
            }
        })
        .await
}

#[utoipa::path(post, path = "/api/v1/orders/{order_id}/cancel", tag = "orders", security(("bearer" = [])), params(("order_id" = String, Path, description = "order id")), responses((status = 200, description = "status cancelled", body = crate::http::openapi::OrderDoc), (status = 400, description = "validation_failed / invalid_json", body = crate::http::openapi::ErrorBody), (status = 401, description = "unauthorized", body = crate::http::openapi::ErrorBody), (status = 404, description = "order_not_found", body = crate::http::openapi::ErrorBody), (status = 409, description = "order_not_cancellable, request_in_progress", body = crate::http::openapi::ErrorBody)))]
#[tracing::instrument(skip_all, fields(order_id = %path))]
pub async fn cancel(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = order_id(&path)?;
    let state2 = state.clone();
    state
        .user_serializer
        .run(caller.user_id, async move {
            match state2.lifecycle.cancel(id, Canceller::Owner(caller.user_id)).await? {
                Some(o) => Ok(HttpResponse::Ok().json(o)),
                None => Err(refusal(&state2, id, caller, "order_not_cancellable", "cancelled").await),
            }
        })
        .await
}
