//! Admin and public voucher routes.
use super::model::{whole, NewVoucher, Voucher, MAX_STOCK};
use super::repo;
use super::stock::{self, Event};
use crate::app::AppState;
use crate::http::auth::Admin;
use crate::http::{id, ApiError};
use actix_web::{web, HttpResponse};
use anyhow::Context;
use serde::Deserialize;
use serde_json::{json, Value};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/admin/vouchers", web::post().to(create))
        .route("/admin/vouchers/{id}", web::get().to(admin_get))
        .route("/admin/vouchers/{id}/stock", web::post().to(add_stock))
        .route("/vouchers", web::get().to(list))
        .route("/vouchers/{id}", web::get().to(public_get));
}

/// The `{id}` of a path, or 400 naming it.
pub fn path_id(raw: &str) -> Result<i64, ApiError> {
    id::parse_str(raw).map_err(|e| ApiError::validation("id", e))
}

fn voucher_not_found() -> ApiError {
    ApiError::not_found("voucher_not_found", "no voucher with this id")
}

#[utoipa::path(post, path = "/api/v1/admin/vouchers", tag = "admin", security(("bearer" = [])), request_body = crate::http::openapi::NewVoucherDoc, responses((status = 201, body = crate::http::openapi::VoucherDoc), (status = 400, description = "validation_failed / invalid_json", body = crate::http::openapi::ErrorBody), (status = 401, description = "unauthorized", body = crate::http::openapi::ErrorBody), (status = 403, description = "forbidden", body = crate::http::openapi::ErrorBody), (status = 413, description = "payload_too_large", body = crate::http::openapi::ErrorBody)))]
#[tracing::instrument(skip_all)]
pub async fn create(
    state: web::Data<AppState>,
    _admin: Admin,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let new = NewVoucher::parse(&body)?;
    let mut tx = state.pg.begin().await?;
    let voucher = repo::insert(&mut tx, &new).await?;
    if let Some(flash) = &voucher.flash {
        // Loaded before the commit: a voucher that exists in Postgres always has its
        // stock in Redis (if Redis is down, nothing is created).
        stock::load(&state.redis, &state.keys, voucher.id, flash.stock).await?;
    }
    tx.commit().await?;
    announce(&state, &voucher).await;
    Ok(HttpResponse::Created().json(&voucher))
}

#[utoipa::path(get, path = "/api/v1/admin/vouchers/{id}", tag = "admin", security(("bearer" = [])), params(("id" = String, Path, description = "voucher id")), responses((status = 200, description = "the voucher and stats", body = crate::http::openapi::VoucherDoc), (status = 400, description = "validation_failed / invalid_json", body = crate::http::openapi::ErrorBody), (status = 401, description = "unauthorized", body = crate::http::openapi::ErrorBody), (status = 403, description = "forbidden", body = crate::http::openapi::ErrorBody), (status = 404, description = "voucher_not_found", body = crate::http::openapi::ErrorBody)))]
#[tracing::instrument(skip_all)]
pub async fn admin_get(
    state: web::Data<AppState>,
    _admin: Admin,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = path_id(&path)?;
    let voucher = repo::get(&state.pg, id).await?.ok_or_else(voucher_not_found)?;
    Ok(HttpResponse::Ok().json(with_stats(&state, voucher).await?))
}

#[utoipa::path(post, path = "/api/v1/admin/vouchers/{id}/stock", tag = "admin", security(("bearer" = [])), params(("id" = String, Path, description = "voucher id")), request_body = crate::http::openapi::AddStock, responses((status = 200, description = "the voucher and stats", body = crate::http::openapi::VoucherDoc), (status = 400, description = "validation_failed / invalid_json", body = crate::http::openapi::ErrorBody), (status = 401, description = "unauthorized", body = crate::http::openapi::ErrorBody), (status = 403, description = "forbidden", body = crate::http::openapi::ErrorBody), (status = 404, description = "voucher_not_found", body = crate::http::openapi::ErrorBody), (status = 409, description = "not_a_flash_sale", body = crate::http::openapi::ErrorBody), (status = 503, description = "unavailable", body = crate::http::openapi::ErrorBody)))]
#[tracing::instrument(skip_all)]
pub async fn add_stock(
    state: web::Data<AppState>,
    _admin: Admin,
    path: web::Path<String>,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let id = path_id(&path)?;
    let add = body
        .get("add")
        .filter(|v| !v.is_null())
        .ok_or_else(|| ApiError::validation("add", "is required"))?;
    let add = whole(add, "add", 1, MAX_STOCK)? as i32;
    let mut tx = state.pg.begin().await?;
    let voucher = repo::get(&mut *tx, id).await?.ok_or_else(voucher_not_found)?;
    let Some(flash) = &voucher.flash else {
        return Err(ApiError::conflict(
            "not_a_flash_sale",
            "this voucher has no stock to add to",
        ));
    };
    if flash.stock as i64 + add as i64 > MAX_STOCK {
        return Err(ApiError::validation(
            "add",
            format!("total stock would exceed {MAX_STOCK}"),
        ));
    }
    repo::add_stock(&mut tx, id, add).await?;
    // Redis first, inside the transaction: if Redis refuses, Postgres is unchanged.
    if stock::add(&state.redis, &state.keys, id, add).await?.is_none() {
        return Err(ApiError::unavailable(
            "the sale's stock is being rebuilt, try again shortly",
            1,
        ));
    }
    if let Err(e) = tx.commit().await {
        // Take the units back out of Redis so that it never sells more than Postgres has.
        let _ = stock::add(&state.redis, &state.keys, id, -add).await;
        return Err(e.into());
    }
    let voucher = repo::get(&state.pg, id).await?.ok_or_else(voucher_not_found)?;
    announce(&state, &voucher).await;
    Ok(HttpResponse::Ok().json(with_stats(&state, voucher).await?))
}

#[derive(Deserialize)]
pub struct ListQuery {
    shop_id: Option<String>,
}

#[utoipa::path(get, path = "/api/v1/vouchers", tag = "vouchers", params(("shop_id" = String, Query)), responses((status = 200, body = crate::http::openapi::VoucherList), (status = 400, description = "validation_failed / invalid_json", body = crate::http::openapi::ErrorBody)))]
#[tracing::instrument(skip_all)]
pub async fn list(state: web::Data<AppState>, q: web::Query<ListQuery>) -> Result<HttpResponse, ApiError> {
    let raw = q
        .shop_id
        .as_deref()
        .ok_or_else(|| ApiError::validation("shop_id", "is required"))?;
    let shop_id = id::parse_str(raw).map_err(|e| ApiError::validation("shop_id", e))?;
    let items = repo::list_by_shop(&state.pg, shop_id).await?;
    Ok(HttpResponse::Ok().json(json!({ "items": items })))
}

#[utoipa::path(get, path = "/api/v1/vouchers/{id}", tag = "vouchers", params(("id" = String, Path, description = "voucher id")), responses((status = 200, description = "the voucher, with stock_remaining for flash sales", body = crate::http::openapi::VoucherDoc), (status = 400, description = "validation_failed / invalid_json", body = crate::http::openapi::ErrorBody), (status = 404, description = "voucher_not_found", body = crate::http::openapi::ErrorBody)))]
#[tracing::instrument(skip_all)]
pub async fn public_get(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let id = path_id(&path)?;
    let voucher = match state.cache.get(id) {
        Some(e) => e.voucher.clone(),
        None => repo::get(&state.pg, id).await?.ok_or_else(voucher_not_found)?,
    };
    let mut body = serde_json::to_value(&voucher).context("serialising a voucher")?;
    if voucher.is_flash_sale() {
        let (remaining, _) = stock::stats(&state.redis, &state.keys, id).await?;
        body["stock_remaining"] = json!(remaining);
    }
    Ok(HttpResponse::Ok().json(body))
}

async fn with_stats(state: &AppState, voucher: Voucher) -> Result<Value, ApiError> {
    let mut body = serde_json::to_value(&voucher).context("serialising a voucher")?;
    let persisted = repo::orders_persisted(&state.pg, voucher.id).await?;
    let (remaining, accepted) = if voucher.is_flash_sale() {
        stock::stats(&state.redis, &state.keys, voucher.id).await?
    } else {
        (None, 0)
    };
    body["stats"] = json!({
        "stock_remaining": remaining,
        "orders_accepted": accepted,
        "orders_persisted": persisted,
    });
    Ok(body)
}

/// This instance's cache learns at once; the others through pub/sub.
async fn announce(state: &AppState, voucher: &Voucher) {
    state.cache.put(voucher.clone());
    if let Err(e) = stock::publish(&state.redis, &state.keys, Event::Voucher(voucher.id)).await {
        tracing::warn!(error = %format!("{e:#}"), "could not announce a voucher change; other instances catch up on refresh");
    }
}
