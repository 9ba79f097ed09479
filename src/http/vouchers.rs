//! Admin and public voucher routes.
use super::auth::Admin;
use super::error::ApiError;
use super::error::ErrorBody;
use super::idempotency::{self, Claim};
use super::path::path_id;
use super::responses::{
    BadRequest, BodyRefused, Forbidden, NotAFlashSale, RateLimited, Unauthorized, Unavailable, VoucherNotFound,
};
use super::state::AppState;
use crate::id;
use crate::reports::{Audit, Lookup};
use crate::sales::model::{FlashSale, NewVoucher, Voucher};
use crate::sales::stock;
use crate::sales::view::{PublicVoucher, SaleStats, ShardStats, VoucherList, VoucherWithStats};
use actix_web::http::header;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use serde_json::Value;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/admin/vouchers", web::post().to(create))
        .route("/admin/vouchers/{id}", web::get().to(admin_get))
        .route("/admin/vouchers/{id}/audit", web::get().to(admin_audit))
        .route("/vouchers", web::get().to(list))
        .route("/vouchers/{id}", web::get().to(public_get));
}

/// Voucher `id` for a public route: from this instance's cache, else from
/// Postgres, unless Postgres said lately that there is none (404 at once: an
/// unknown id costs Postgres one query per id and `SECKILL_MISSING_VOUCHER_TTL_MS`,
/// not one per request; see `voucher::cache::missing`).
pub(super) async fn cached(state: &AppState, id: crate::id::VoucherId) -> Result<Voucher, ApiError> {
    state.sales.lookup(id).await?.ok_or_else(voucher_not_found)
}

/// The flash sale `id` (see [`cached`]): 409 `not_a_flash_sale` for an ordinary
/// voucher, which has no admission.
pub(super) async fn sale(state: &AppState, id: crate::id::VoucherId) -> Result<(Voucher, FlashSale), ApiError> {
    let voucher = cached(state, id).await?;
    let flash = voucher
        .flash
        .clone()
        .ok_or_else(|| ApiError::conflict("not_a_flash_sale", "an ordinary voucher has no admission"))?;
    Ok((voucher, flash))
}

pub(super) fn voucher_not_found() -> ApiError {
    ApiError::not_found("voucher_not_found", "no voucher with this id")
}

#[utoipa::path(post, path = "/api/v1/admin/vouchers", tag = "admin", security(("bearer" = [])),
    params(("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255, pattern = "^[!-~]+$",
        description = "a retry with the same key and body answers as the first request did and creates nothing")),
    request_body = NewVoucher,
    responses((status = 201, description = "the voucher", body = Voucher,
            headers(("Location" = String, description = "the voucher's URL, /api/v1/admin/vouchers/{id}"))),
        BadRequest, Unauthorized, Forbidden, BodyRefused,
        (status = 422, body = ErrorBody, description = "idempotency_key_reused: the Idempotency-Key was sent before with another request"),
        RateLimited, Unavailable))]
#[tracing::instrument(skip_all)]
pub async fn create(
    req: HttpRequest,
    state: web::Data<AppState>,
    admin: Admin,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let new = NewVoucher::parse(&body)?;
    let key = idempotency::key_of(&req)?;
    let admin = admin.0.user_id;
    let mut tx = state.sales.begin().await?;
    if let Some(key) = &key {
        match idempotency::claim(&mut tx, admin, key, &idempotency::fingerprint(&req, &body)).await? {
            Claim::New => {}
            Claim::Replay { status, body } => return Ok(created(status, body)),
            // The answer is stored with the voucher, in one transaction.
            Claim::Unanswered { .. } => {
                return Err(ApiError::internal(anyhow::anyhow!(
                    "an idempotency key of a created voucher without its answer"
                )))
            }
        }
    }
    let voucher = state.sales.create(&mut tx, &new).await?;
    let answer = serde_json::to_value(&voucher).map_err(anyhow::Error::from)?;
    if let Some(key) = &key {
        idempotency::answer(&mut *tx, admin, key, StatusCode::CREATED, &answer).await?;
    }
    tx.commit().await?;
    state.sales.announce(&voucher).await;
    Ok(created(StatusCode::CREATED, answer))
}

/// A created voucher's answer (first or replayed), with its URL in `Location`.
fn created(status: StatusCode, voucher: Value) -> HttpResponse {
    let mut resp = HttpResponse::build(status);
    if let Some(id) = voucher["id"].as_str() {
        resp.insert_header((header::LOCATION, format!("/api/v1/admin/vouchers/{id}")));
    }
    resp.json(voucher)
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
    let voucher = state.sales.get(id).await?.ok_or_else(voucher_not_found)?;
    Ok(web::Json(with_stats(&state, voucher).await?))
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
    match state.reports.audit(id).await? {
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
    after: Option<String>,
    limit: Option<String>,
}

/// Largest page of `GET /api/v1/vouchers`.
const MAX_PAGE: i64 = 1000;

#[utoipa::path(get, path = "/api/v1/vouchers", tag = "vouchers",
    params(("shop_id" = i64, Query, minimum = 1),
        ("after" = Option<i64>, Query, minimum = 1, description = "only vouchers with a larger id (the previous page's next_after)"),
        ("limit" = Option<i32>, Query, minimum = 1, maximum = 1000, description = "page size, default 1000")),
    responses((status = 200, description = "one page of the shop's vouchers, in id order", body = VoucherList),
        BadRequest, RateLimited, Unavailable))]
#[tracing::instrument(skip_all)]
pub async fn list(state: web::Data<AppState>, q: web::Query<ListQuery>) -> Result<web::Json<VoucherList>, ApiError> {
    let raw = q
        .shop_id
        .as_deref()
        .ok_or_else(|| ApiError::validation("shop_id", "is required"))?;
    let shop_id = id::parse_str(raw).map_err(|e| ApiError::validation("shop_id", e))?;
    let after = q
        .after
        .as_deref()
        .map(|raw| id::parse_str(raw).map_err(|e| ApiError::validation("after", e)))
        .transpose()?;
    let limit = match q.limit.as_deref() {
        // As many as the list gave before it had pages: a client that does not
        // follow `next_after` sees no fewer vouchers than it used to.
        None => MAX_PAGE,
        Some(raw) => raw
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| ApiError::validation("limit", format!("must be a whole number from 1 to {MAX_PAGE}")))?,
    };
    let items = state.sales.list_by_shop(shop_id, after, limit).await?;
    let next_after = (items.len() as i64 == limit)
        .then(|| items.last().map(|v| v.id.to_string()))
        .flatten();
    Ok(web::Json(VoucherList { items, next_after }))
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
    let voucher = cached(&state, id).await?;
    let stock_remaining = if voucher.is_flash_sale() {
        let shards = voucher.flash.as_ref().map_or(1, |f| f.shards());
        // A crowd browsing the sale costs Redis a GET per shard this often, per
        // instance, not per request.
        let sales = state.sales.clone();
        let units = state
            .http
            .public_stock
            .get(id.get(), stock::PUBLIC_REFRESH, || async move {
                sales.remaining(id, shards).await
            })
            .await?;
        Some(units)
    } else {
        None
    };
    Ok(web::Json(PublicVoucher {
        voucher,
        stock_remaining,
    }))
}

pub(super) async fn with_stats(state: &AppState, voucher: Voucher) -> Result<VoucherWithStats, ApiError> {
    let orders_persisted = state.ordering.lookup.persisted_of_sale(voucher.typed_id()).await?;
    let stats = match &voucher.flash {
        Some(f) => {
            let s = state.sales.stats(voucher.typed_id(), f.shards()).await?;
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
