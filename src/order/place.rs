//! `POST /api/v1/vouchers/{id}/orders`: the hot path.
//!
//! No Postgres: the voucher and its sale window come from the in-process cache. One
//! Redis round trip: `lua/reserve.lua` (EVALSHA) admits or refuses the order and, when
//! it admits it, has already put it in the voucher's outbox. The order id comes
//! from the ID worker's in-memory block.
use crate::app::AppState;
use crate::http::auth::Caller;
use crate::http::ApiError;
use crate::voucher::routes::path_id;
use actix_web::{web, HttpResponse};
use anyhow::Context;
use redis::Script;
use serde_json::json;
use std::sync::LazyLock;

static RESERVE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/reserve.lua")));

/// What `reserve.lua` decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Reservation {
    Accepted {
        stock_left: i64,
    },
    SoldOut,
    AlreadyOrdered,
    /// Redis has no stock for the voucher (it lost it): refuse, never sell from nothing.
    NotLoaded,
}

/// Runs the script once.
pub async fn reserve(
    state: &AppState,
    voucher_id: i64,
    user_id: i64,
    order_id: i64,
    created_ms: i64,
) -> anyhow::Result<Reservation> {
    let k = &state.keys;
    let mut conn = state.redis.conn().await?;
    let _timer = state.metrics.reserve_seconds.start_timer();
    let code: i64 = RESERVE
        .key(k.stock(voucher_id))
        .key(k.buyers(voucher_id))
        .key(k.orders(voucher_id))
        .key(k.outbox(voucher_id))
        .arg(user_id)
        .arg(order_id)
        .arg(created_ms)
        .arg(voucher_id)
        .invoke_async(&mut conn)
        .await
        .context("reserve.lua")?;
    Ok(match code {
        n if n >= 0 => Reservation::Accepted { stock_left: n },
        -1 => Reservation::SoldOut,
        -2 => Reservation::AlreadyOrdered,
        -3 => Reservation::NotLoaded,
        other => anyhow::bail!("reserve.lua returned unknown code {other}"),
    })
}

fn sold_out() -> ApiError {
    ApiError::conflict("sold_out", "this sale is sold out")
}

/// The metrics label of a handler result.
fn outcome(result: &Result<HttpResponse, ApiError>) -> &'static str {
    match result {
        Ok(_) => "accepted",
        Err(e) => match e.code {
            "sale_not_started" => "not_started",
            "sale_ended" => "ended",
            "voucher_not_found" => "not_found",
            "sold_out" | "already_ordered" | "rate_limited" | "unavailable" | "not_a_flash_sale" => e.code,
            _ => "error",
        },
    }
}

#[utoipa::path(post, path = "/api/v1/vouchers/{id}/orders", tag = "orders", security(("bearer" = [])), params(("id" = String, Path, description = "voucher id")), responses((status = 202, body = crate::http::openapi::Accepted), (status = 400, description = "validation_failed / invalid_json", body = crate::http::openapi::ErrorBody), (status = 401, description = "unauthorized", body = crate::http::openapi::ErrorBody), (status = 404, description = "voucher_not_found", body = crate::http::openapi::ErrorBody), (status = 409, description = "not_a_flash_sale, sale_not_started, sale_ended, sold_out, already_ordered", body = crate::http::openapi::ErrorBody), (status = 429, description = "rate_limited (Retry-After)", body = crate::http::openapi::ErrorBody), (status = 503, description = "unavailable (Retry-After)", body = crate::http::openapi::ErrorBody)))]
#[tracing::instrument(skip_all, fields(voucher_id = %path, user_id = caller.user_id))]
pub async fn place(
    req: actix_web::HttpRequest,
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    use actix_web::HttpMessage;
    req.extensions_mut().insert(crate::http::admission::HandlerRan);
    let result = place_inner(&state, caller, &path).await;
    state.metrics.order(outcome(&result));
    result
}

async fn place_inner(state: &AppState, caller: Caller, path: &str) -> Result<HttpResponse, ApiError> {
    let voucher_id = path_id(path)?;
    state.admission.check_user(caller.user_id)?;
    let entry = state
        .cache
        .get(voucher_id)
        .ok_or_else(|| ApiError::not_found("voucher_not_found", "no voucher with this id"))?;
    let flash = entry
        .voucher
        .flash
        .as_ref()
        .ok_or_else(|| ApiError::conflict("not_a_flash_sale", "this voucher is not sold in a flash sale"))?;
    let now = state.clock.now();
    if now < flash.begin_at {
        return Err(ApiError::conflict(
            "sale_not_started",
            format!("the sale starts at {}", flash.begin_at.to_rfc3339()),
        ));
    }
    if now >= flash.end_at {
        return Err(ApiError::conflict(
            "sale_ended",
            format!("the sale ended at {}", flash.end_at.to_rfc3339()),
        ));
    }
    let (known_sold_out, seen) = entry.observe();
    if known_sold_out {
        return Err(sold_out());
    }
    let order_id = state.ids.next_id().await?;
    match reserve(state, voucher_id, caller.user_id, order_id, now.timestamp_millis()).await? {
        Reservation::Accepted { .. } => {
            Ok(HttpResponse::Accepted().json(json!({"order_id": order_id.to_string(), "status": "pending"})))
        }
        Reservation::SoldOut => {
            entry.mark_sold_out(seen);
            Err(sold_out())
        }
        Reservation::AlreadyOrdered => Err(ApiError::conflict(
            "already_ordered",
            "you already have an order for this voucher",
        )),
        Reservation::NotLoaded => {
            tracing::error!(
                voucher_id,
                "flash-sale stock missing in Redis; refusing orders until it is rebuilt"
            );
            Err(ApiError::unavailable("this sale is temporarily unavailable", 2))
        }
    }
}
