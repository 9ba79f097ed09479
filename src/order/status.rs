//! Order status: Postgres has every persisted order; an order Redis accepted that
//! the worker has not written yet is `pending` and is found in the voucher's
//! `orders` hash.
use super::id_worker;
use super::model::{Order, ORDER_COLUMNS};
use crate::app::AppState;
use crate::http::auth::Caller;
use crate::http::{id, ApiError};
use crate::voucher::routes::path_id;
use actix_web::{web, HttpResponse};
use anyhow::Context;
use chrono::Duration;
use sqlx::PgExecutor;

fn not_found() -> ApiError {
    ApiError::not_found("order_not_found", "no such order")
}

pub async fn by_id(db: impl PgExecutor<'_>, order_id: i64) -> Result<Option<Order>, sqlx::Error> {
    sqlx::query_as(&format!("SELECT {ORDER_COLUMNS} FROM voucher_orders WHERE id = $1"))
        .bind(order_id)
        .fetch_optional(db)
        .await
}

/// Finds a pending order by id among the flash sales whose window contains the
/// second the id was made in (one pipelined Redis call).
async fn pending_by_id(state: &AppState, order_id: i64) -> anyhow::Result<Option<Order>> {
    let Some(made) = id_worker::created_at(order_id) else {
        return Ok(None);
    };
    let slack = Duration::seconds(2);
    let candidates: Vec<i64> = state
        .cache
        .flash_sales()
        .iter()
        .filter_map(|e| {
            let f = e.voucher.flash.as_ref()?;
            (f.begin_at - slack <= made && made <= f.end_at + slack).then_some(e.voucher.id)
        })
        .collect();
    if candidates.is_empty() {
        return Ok(None);
    }
    let mut pipe = redis::pipe();
    for v in &candidates {
        pipe.hget(state.keys.orders(*v), order_id);
    }
    let mut conn = state.redis.conn().await?;
    let found: Vec<Option<String>> = pipe
        .query_async(&mut conn)
        .await
        .context("looking up a pending order")?;
    for (voucher_id, value) in candidates.into_iter().zip(found) {
        if let Some((user, ms)) = value.as_deref().and_then(parse_accepted) {
            return Ok(Some(Order::pending(order_id, voucher_id, user, ms)));
        }
    }
    Ok(None)
}

/// "user_id:created_ms" as reserve.lua writes it.
fn parse_accepted(v: &str) -> Option<(i64, i64)> {
    let (u, ms) = v.split_once(':')?;
    Some((u.parse().ok()?, ms.parse().ok()?))
}

/// The order from Postgres, or pending in Redis, whoever owns it.
pub async fn find(state: &AppState, order_id: i64) -> Result<Option<Order>, ApiError> {
    match by_id(&state.pg, order_id).await? {
        Some(o) => Ok(Some(o)),
        None => Ok(pending_by_id(state, order_id).await?),
    }
}

#[utoipa::path(get, path = "/api/v1/orders/{order_id}", tag = "orders", security(("bearer" = [])), params(("order_id" = String, Path, description = "order id")), responses((status = 200, body = crate::http::openapi::OrderDoc), (status = 400, description = "validation_failed / invalid_json", body = crate::http::openapi::ErrorBody), (status = 401, description = "unauthorized", body = crate::http::openapi::ErrorBody), (status = 404, description = "order_not_found, also for an order of someone else", body = crate::http::openapi::ErrorBody)))]
#[tracing::instrument(skip_all, fields(order_id = %path))]
pub async fn get(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let order_id = id::parse_str(&path).map_err(|e| ApiError::validation("order_id", e))?;
    match find(&state, order_id).await? {
        // Someone else's order looks exactly like a missing one.
        Some(o) if o.user_id == caller.user_id || caller.is_admin() => Ok(HttpResponse::Ok().json(o)),
        _ => Err(not_found()),
    }
}

#[utoipa::path(get, path = "/api/v1/vouchers/{id}/orders/mine", tag = "orders", security(("bearer" = [])), params(("id" = String, Path, description = "voucher id")), responses((status = 200, body = crate::http::openapi::OrderDoc), (status = 400, description = "validation_failed / invalid_json", body = crate::http::openapi::ErrorBody), (status = 401, description = "unauthorized", body = crate::http::openapi::ErrorBody), (status = 404, description = "order_not_found", body = crate::http::openapi::ErrorBody)))]
#[tracing::instrument(skip_all, fields(voucher_id = %path))]
pub async fn mine(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let voucher_id = path_id(&path)?;
    let k = &state.keys;
    let mut conn = state.redis.conn().await?;
    // The shopper's live order, if Redis knows one.
    let live: Option<i64> = redis::cmd("HGET")
        .arg(k.buyers(voucher_id))
        .arg(caller.user_id)
        .query_async(&mut conn)
        .await
        .context("reading the shopper's order mark")?;
    if let Some(order_id) = live {
        if let Some(o) = by_id(&state.pg, order_id).await? {
            return Ok(HttpResponse::Ok().json(o));
        }
        let accepted: Option<String> = redis::cmd("HGET")
            .arg(k.orders(voucher_id))
            .arg(order_id)
            .query_async(&mut conn)
            .await
            .context("reading a pending order")?;
        let ms = accepted
            .as_deref()
            .and_then(parse_accepted)
            .map(|(_, ms)| ms)
            .unwrap_or_default();
        return Ok(HttpResponse::Ok().json(Order::pending(order_id, voucher_id, caller.user_id, ms)));
    }
    // No live order: the latest one in Postgres (e.g. cancelled), if any.
    let latest: Option<Order> = sqlx::query_as(&format!(
        "SELECT {ORDER_COLUMNS} FROM voucher_orders WHERE user_id = $1 AND voucher_id = $2
         ORDER BY created_at DESC, id DESC LIMIT 1"
    ))
    .bind(caller.user_id)
    .bind(voucher_id)
    .fetch_optional(&state.pg)
    .await?;
    latest.map(|o| HttpResponse::Ok().json(o)).ok_or_else(not_found)
}
