//! `POST /api/v1/orders/{order_id}/pay` and `.../cancel`: the owner only (a
//! shopper token: admin and service tokens get 403), one request
//! of a shopper at a time across instances (per-user serialization), within a
//! per-shopper rate limit checked before the wait for the shopper's lock (429
//! `rate_limited`, `SECKILL_RATE_LIMIT_PAY_CANCEL_PER_USER`).
use super::auth::{Caller, Shopper};
use super::error::ApiError;
use super::error::ErrorBody;
use super::path::path_order_id;
use super::responses::{BadRequest, Forbidden, OrderNotFound, RateLimited, Unauthorized, Unavailable};
use super::state::AppState;
use crate::id::OrderId;
use crate::ordering::lifecycle::Canceller;
use crate::ordering::Order;
use actix_web::web;

/// Why the conditional update changed nothing: 404 if the caller cannot see the
/// order, else 409 `code` naming its state.
async fn refusal(state: &AppState, order_id: OrderId, caller: Caller, code: &'static str, verb: &str) -> ApiError {
    match state.ordering.lookup.find(order_id, Some(caller.user())).await {
        Ok(Some(o)) if o.user_id == caller.user() => {
            ApiError::conflict(code, format!("an order that is {} cannot be {verb}", o.status))
        }
        Ok(_) => ApiError::not_found("order_not_found", "no such order"),
        Err(e) => e.into(),
    }
}

#[utoipa::path(post, path = "/api/v1/orders/{order_id}/pay", tag = "orders", security(("bearer" = [])),
    params(("order_id" = i64, Path, minimum = 1, description = "order id")),
    responses((status = 200, description = "the order, status paid", body = Order),
        BadRequest, Unauthorized, Forbidden, OrderNotFound,
        (status = 409, body = ErrorBody,
            description = "order_not_payable (it is not created), request_in_progress"),
        RateLimited, Unavailable))]
#[tracing::instrument(skip_all, fields(order_id = %path))]
pub async fn pay(
    state: web::Data<AppState>,
    Shopper(caller): Shopper,
    path: web::Path<String>,
) -> Result<web::Json<Order>, ApiError> {
    let id = path_order_id(&path)?;
    state.http.rate_limits.check_pay_cancel(caller.user_id)?;
    // The guarded future owns a handle on the state (the serializer borrows the other).
    let owned = state.clone();
    state
        .ordering
        .user_serializer
        .run(caller.user_id, async move {
            match owned.ordering.lifecycle.pay(id, caller.user()).await? {
                Some(o) => Ok(web::Json(o)),
                None => Err(refusal(&owned, id, caller, "order_not_payable", "paid").await),
            }
        })
        .await
}

#[utoipa::path(post, path = "/api/v1/orders/{order_id}/cancel", tag = "orders", security(("bearer" = [])),
    params(("order_id" = i64, Path, minimum = 1, description = "order id")),
    responses((status = 200, description = "the order, status cancelled", body = Order),
        BadRequest, Unauthorized, Forbidden, OrderNotFound,
        (status = 409, body = ErrorBody,
            description = "order_not_cancellable (it is not created), request_in_progress"),
        RateLimited, Unavailable))]
#[tracing::instrument(skip_all, fields(order_id = %path))]
pub async fn cancel(
    state: web::Data<AppState>,
    Shopper(caller): Shopper,
    path: web::Path<String>,
) -> Result<web::Json<Order>, ApiError> {
    let id = path_order_id(&path)?;
    state.http.rate_limits.check_pay_cancel(caller.user_id)?;
    let owned = state.clone();
    state
        .ordering
        .user_serializer
        .run(caller.user_id, async move {
            match owned
                .ordering
                .lifecycle
                .cancel(id, Canceller::Owner(caller.user()))
                .await?
            {
                Some(o) => Ok(web::Json(o)),
                None => Err(refusal(&owned, id, caller, "order_not_cancellable", "cancelled").await),
            }
        })
        .await
}
