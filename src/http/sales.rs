//! The admin routes that run a sale from the console: the list of every voucher,
//! pause and resume, and the live numbers of one sale.
use super::auth::Admin;
use super::error::ApiError;
use super::path::path_id;
use super::responses::{BadRequest, Forbidden, NotAFlashSale, RateLimited, Unauthorized, Unavailable, VoucherNotFound};
use super::state::AppState;
use super::vouchers::{voucher_not_found, with_stats};
use crate::id;
use crate::reports::view::{LiveSale, OrderCounts};
use crate::reports::Lookup;
use crate::sales::service::NotPaused;
use crate::sales::view::VoucherPage;
use crate::sales::Voucher;
use actix_web::web;
use serde::Deserialize;

/// Largest page of `GET /api/v1/admin/vouchers`.
const MAX_PAGE: i64 = 200;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/admin/vouchers", web::get().to(admin_list))
        .route("/admin/vouchers/{id}/pause", web::post().to(pause))
        .route("/admin/vouchers/{id}/resume", web::post().to(resume))
        .route("/admin/vouchers/{id}/live", web::get().to(live));
}

fn not_a_flash_sale() -> ApiError {
    ApiError::conflict("not_a_flash_sale", "an ordinary voucher has no sale to pause or watch")
}

#[derive(Deserialize)]
pub struct PageQuery {
    before: Option<String>,
    limit: Option<String>,
}

#[utoipa::path(get, path = "/api/v1/admin/vouchers", tag = "admin", security(("bearer" = [])),
    params(("before" = Option<i64>, Query, minimum = 1, description = "only vouchers with a smaller id (the previous page's next_before)"),
        ("limit" = Option<i32>, Query, minimum = 1, maximum = 200, description = "page size, default 50")),
    responses((status = 200, description = "one page of every voucher, newest first", body = VoucherPage),
        BadRequest, Unauthorized, Forbidden, RateLimited, Unavailable))]
#[tracing::instrument(skip_all)]
pub async fn admin_list(
    state: web::Data<AppState>,
    _admin: Admin,
    q: web::Query<PageQuery>,
) -> Result<web::Json<VoucherPage>, ApiError> {
    let before = q
        .before
        .as_deref()
        .map(|raw| id::parse_str(raw).map_err(|e| ApiError::validation("before", e)))
        .transpose()?;
    let limit = match q.limit.as_deref() {
        None => 50,
        Some(raw) => raw
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| ApiError::validation("limit", format!("must be a whole number from 1 to {MAX_PAGE}")))?,
    };
    let items = state.sales.page(before, limit).await?;
    let next_before = (items.len() as i64 == limit)
        .then(|| items.last().map(|v| v.id.to_string()))
        .flatten();
    Ok(web::Json(VoucherPage { items, next_before }))
}

#[utoipa::path(post, path = "/api/v1/admin/vouchers/{id}/pause", tag = "admin", security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, description = "voucher id")),
    responses((status = 200, description = "the voucher, `paused` true: every instance answers orders with 409 sale_paused within a second; orders admitted before stay on their way", body = Voucher),
        BadRequest, Unauthorized, Forbidden, VoucherNotFound, NotAFlashSale, RateLimited, Unavailable))]
#[tracing::instrument(skip_all, fields(voucher_id = %path))]
pub async fn pause(
    state: web::Data<AppState>,
    _admin: Admin,
    path: web::Path<String>,
) -> Result<web::Json<Voucher>, ApiError> {
    set_paused(&state, path_id(&path)?, true).await.map(web::Json)
}

#[utoipa::path(post, path = "/api/v1/admin/vouchers/{id}/resume", tag = "admin", security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, description = "voucher id")),
    responses((status = 200, description = "the voucher, `paused` false: every instance sells again within a second", body = Voucher),
        BadRequest, Unauthorized, Forbidden, VoucherNotFound, NotAFlashSale, RateLimited, Unavailable))]
#[tracing::instrument(skip_all, fields(voucher_id = %path))]
pub async fn resume(
    state: web::Data<AppState>,
    _admin: Admin,
    path: web::Path<String>,
) -> Result<web::Json<Voucher>, ApiError> {
    set_paused(&state, path_id(&path)?, false).await.map(web::Json)
}

/// [`crate::sales::Sales::set_paused`]: the other instances learn of it by
/// pub/sub or, if that is lost, by their pause check within a second.
/// Idempotent: pausing a paused sale answers 200 as well.
async fn set_paused(state: &AppState, id: crate::id::VoucherId, paused: bool) -> Result<Voucher, ApiError> {
    state.sales.set_paused(id, paused).await?.map_err(|not| match not {
        NotPaused::NotAFlashSale => not_a_flash_sale(),
        NotPaused::NotFound => voucher_not_found(),
    })
}

#[utoipa::path(get, path = "/api/v1/admin/vouchers/{id}/live", operation_id = "live_sale", tag = "admin", security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, description = "voucher id")),
    responses((status = 200, description = "the sale's numbers for the admin console: stock, orders by outcome, the relay, the books", body = LiveSale),
        BadRequest, Unauthorized, Forbidden, VoucherNotFound, NotAFlashSale, RateLimited, Unavailable))]
#[tracing::instrument(skip_all, fields(voucher_id = %path))]
pub async fn live(
    state: web::Data<AppState>,
    _admin: Admin,
    path: web::Path<String>,
) -> Result<web::Json<LiveSale>, ApiError> {
    let id = path_id(&path)?;
    let voucher = state.sales.get(id).await?.ok_or_else(voucher_not_found)?;
    if !voucher.is_flash_sale() {
        return Err(not_a_flash_sale());
    }
    // Timed-out orders before the books: they are a subset of the cancelled ones and
    // only grow, so read first they never exceed `cancelled` read after.
    let timed_out = state.ordering.lookup.timed_out_of_sale(id).await?;
    let audit = match state.reports.books(id).await? {
        Lookup::Found(books) => books,
        Lookup::NotFound => return Err(voucher_not_found()),
        Lookup::NotAFlashSale => return Err(not_a_flash_sale()),
    };
    let shards = voucher.flash.as_ref().map_or(1, |f| f.shards());
    let relay = state.ordering.lookup.relay_state(id, shards).await?;
    let view = with_stats(&state, voucher).await?;
    let orders = OrderCounts {
        accepted: view.stats.orders_accepted,
        persisted: view.stats.orders_persisted,
        failed: audit.postgres.failed,
        awaiting_payment: audit.postgres.created,
        paid: audit.postgres.paid,
        cancelled: audit.postgres.cancelled,
        timed_out,
    };
    Ok(web::Json(LiveSale {
        voucher: view.voucher,
        stats: view.stats,
        orders,
        relay,
        audit,
        read_at: state.clock.now(),
    }))
}
