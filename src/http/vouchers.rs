//! Admin and public voucher routes.
use super::auth::Admin;
use super::error::ErrorBody;
use super::path::path_id;
use super::responses::{
    BadRequest, BodyRefused, Forbidden, NotAFlashSale, RateLimited, Unauthorized, Unavailable, VoucherNotFound,
};
use super::ApiError;
use crate::app::AppState;
use crate::id;
use crate::voucher::audit::{self, Audit, Lookup};
use crate::voucher::model::{AddStock, NewVoucher, Voucher, MAX_STOCK};
use crate::voucher::repo;
use crate::voucher::stock::{self, Event};
use crate::voucher::topup;
use crate::voucher::view::{PublicVoucher, SaleStats, ShardStats, TopUpView, ToppedUp, VoucherList, VoucherWithStats};
use actix_web::{web, HttpResponse};
use serde::Deserialize;
use serde_json::Value;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/admin/vouchers", web::post().to(create))
        .route("/admin/vouchers/{id}", web::get().to(admin_get))
        .route("/admin/vouchers/{id}/stock", web::post().to(add_stock))
        .route("/admin/vouchers/{id}/audit", web::get().to(admin_audit))
        .route("/vouchers", web::get().to(list))
        .route("/vouchers/{id}", web::get().to(public_get));
}

pub(super) fn voucher_not_found() -> ApiError {
    ApiError::not_found("voucher_not_found", "no voucher with this id")
}

#[utoipa::path(post, path = "/api/v1/admin/vouchers", tag = "admin", security(("bearer" = [])),
    request_body = NewVoucher,
    responses((status = 201, description = "the voucher", body = Voucher),
        BadRequest, Unauthorized, Forbidden, BodyRefused, RateLimited, Unavailable))]
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
        stock::load(&state.redis, &state.keys, voucher.id, flash.stock, flash.shards()).await?;
    }
    tx.commit().await?;
    announce(&state, &voucher).await;
    Ok(HttpResponse::Created().json(&voucher))
}

#[utoipa::path(get, path = "/api/v1/admin/vouchers/{id}", tag = "admin", security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, description = "voucher id")),
    responses((status = 200, description = "the voucher and its sale's numbers", body = VoucherWithStats),
        BadRequest, Unauthorized, Forbidden, VoucherNotFound, RateLimited, Unavailable))]
#[tracing::instrument(skip_all)]
pub async fn admin_get(
    state: web::Data<AppState>,
    _admin: Admin,
    path: web::Path<String>,
) -> Result<web::Json<VoucherWithStats>, ApiError> {
    let id = path_id(&path)?;
    let voucher = repo::get(&state.pg, id).await?.ok_or_else(voucher_not_found)?;
    Ok(web::Json(with_stats(&state, voucher).await?))
}

#[utoipa::path(post, path = "/api/v1/admin/vouchers/{id}/stock", tag = "admin", security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, description = "voucher id")), request_body = AddStock,
    responses((status = 200, description = "the voucher, its sale's numbers and the top-up (final: do not retry)", body = ToppedUp),
        BadRequest, Unauthorized, Forbidden, VoucherNotFound,
        (status = 409, body = ErrorBody,
            description = "not_a_flash_sale; stock_limit_exceeded: the voucher's stock plus `add` would exceed 100,000,000"),
        BodyRefused, RateLimited, Unavailable))]
#[tracing::instrument(skip_all)]
pub async fn add_stock(
    state: web::Data<AppState>,
    _admin: Admin,
    path: web::Path<String>,
    body: web::Json<Value>,
) -> Result<web::Json<ToppedUp>, ApiError> {
    let id = path_id(&path)?;
    let add = AddStock::parse(&body)?.add;
    let mut tx = state.pg.begin().await?;
    let voucher = repo::get(&mut *tx, id).await?.ok_or_else(voucher_not_found)?;
    let Some(flash) = &voucher.flash else {
        return Err(ApiError::conflict(
            "not_a_flash_sale",
            "this voucher has no stock to add to",
        ));
    };
    // A valid `add` that the voucher's stock leaves no room for: a conflict with
    // the voucher's state, not a malformed request.
    if flash.stock as i64 + add as i64 > MAX_STOCK {
        return Err(ApiError::conflict(
            "stock_limit_exceeded",
            format!("add: the total stock would exceed {MAX_STOCK}"),
        ));
    }
    // Postgres first: stock, total and a pending top-up in one transaction.
    let top_up = topup::record(&mut tx, id, add).await?.ok_or_else(voucher_not_found)?;
    let voucher = repo::get(&mut *tx, id).await?.ok_or_else(voucher_not_found)?;
    tx.commit().await?;
    // Committed: the top-up happens whatever fails from here on, and the answer is
    // 200 (a retry would add the units twice). Redis now, or the recovery pass.
    let applied = match topup::apply(&state.pg, &state.redis, &state.keys, top_up.id).await {
        Ok(applied) => applied,
        Err(e) => {
            tracing::warn!(top_up = top_up.id, error = %format!("{e:#}"), "top-up left pending for recovery");
            false
        }
    };
    announce(&state, &voucher).await;
    // The numbers may not be readable (Redis away): the top-up stands all the same.
    let stats = with_stats(&state, voucher.clone()).await.ok().map(|v| v.stats);
    Ok(web::Json(ToppedUp {
        voucher,
        stats,
        top_up: TopUpView {
            id: top_up.id,
            units: top_up.units,
            applied,
        },
    }))
}

#[utoipa::path(get, path = "/api/v1/admin/vouchers/{id}/audit", tag = "admin", security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, description = "voucher id")),
    responses((status = 200, description = "the sale's books and whether they balance", body = Audit),
        BadRequest, Unauthorized, Forbidden, VoucherNotFound, NotAFlashSale, RateLimited, Unavailable))]
#[tracing::instrument(skip_all)]
pub async fn admin_audit(
    state: web::Data<AppState>,
    _admin: Admin,
    path: web::Path<String>,
) -> Result<web::Json<Audit>, ApiError> {
    let id = path_id(&path)?;
    match audit::audit(&state.pg, &state.redis, &state.keys, &state.broker, id).await? {
        Lookup::Found(books) => Ok(web::Json(books)),
        Lookup::NotFound => Err(voucher_not_found()),
        Lookup::NotAFlashSale => Err(ApiError::conflict(
            "not_a_flash_sale",
            "an ordinary voucher has no stock to audit",
        )),
    }
}

#[derive(Deserialize)]
pub struct ListQuery {
    shop_id: Option<String>,
}

#[utoipa::path(get, path = "/api/v1/vouchers", tag = "vouchers",
    params(("shop_id" = i64, Query, minimum = 1)),
    responses((status = 200, description = "the shop's vouchers", body = VoucherList),
        BadRequest, RateLimited, Unavailable))]
#[tracing::instrument(skip_all)]
pub async fn list(state: web::Data<AppState>, q: web::Query<ListQuery>) -> Result<web::Json<VoucherList>, ApiError> {
    let raw = q
        .shop_id
        .as_deref()
        .ok_or_else(|| ApiError::validation("shop_id", "is required"))?;
    let shop_id = id::parse_str(raw).map_err(|e| ApiError::validation("shop_id", e))?;
    let items = repo::list_by_shop(&state.pg, shop_id).await?;
    Ok(web::Json(VoucherList { items }))
}

#[utoipa::path(get, path = "/api/v1/vouchers/{id}", tag = "vouchers",
    params(("id" = i64, Path, minimum = 1, description = "voucher id")),
    responses((status = 200, description = "the voucher; a flash sale's with stock_remaining", body = PublicVoucher),
        BadRequest, VoucherNotFound, RateLimited, Unavailable))]
#[tracing::instrument(skip_all)]
pub async fn public_get(
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<web::Json<PublicVoucher>, ApiError> {
    let id = path_id(&path)?;
    let voucher = match state.cache.get(id) {
        Some(e) => e.voucher.clone(),
        None => repo::get(&state.pg, id).await?.ok_or_else(voucher_not_found)?,
    };
    let stock_remaining = if voucher.is_flash_sale() {
        let shards = voucher.flash.as_ref().map_or(1, |f| f.shards());
        Some(stock::stats(&state.redis, &state.keys, id, shards).await?.stock)
    } else {
        None
    };
    Ok(web::Json(PublicVoucher {
        voucher,
        stock_remaining,
    }))
}

pub(super) async fn with_stats(state: &AppState, voucher: Voucher) -> Result<VoucherWithStats, ApiError> {
    let orders_persisted = repo::orders_persisted(&state.pg, voucher.id).await?;
    let stats = match &voucher.flash {
        Some(f) => {
            let s = stock::stats(&state.redis, &state.keys, voucher.id, f.shards()).await?;
            SaleStats {
                stock_remaining: s.stock,
                orders_accepted: s.accepted,
                orders_persisted,
                shards: (f.shards() > 1).then(|| {
                    s.shards
                        .iter()
                        .enumerate()
                        .map(|(k, n)| ShardStats {
                            shard: k as u32,
                            stock_remaining: *n,
                        })
                        .collect()
                }),
            }
        }
        None => SaleStats {
            stock_remaining: None,
            orders_accepted: 0,
            orders_persisted,
            shards: None,
        },
    };
    Ok(VoucherWithStats { voucher, stats })
}

/// This instance's cache learns at once; the others through pub/sub.
pub(super) async fn announce(state: &AppState, voucher: &Voucher) {
    state.cache.put(voucher.clone());
    if let Err(e) = stock::publish(&state.redis, &state.keys, Event::Voucher(voucher.id)).await {
        tracing::warn!(error = %format!("{e:#}"), "could not announce a voucher change; other instances catch up on refresh");
    }
}
