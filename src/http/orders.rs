//! The order routes: placing one (the hot path), reading one, and the caller's
//! order for a voucher. Pay and cancel are in [`super::lifecycle`].
use super::auth::{Caller, Shopper};
use super::error::ApiError;
use super::error::ErrorBody;
use super::path::{path_id, path_order_id};
use super::responses::{BadRequest, Forbidden, OrderNotFound, RateLimited, Unauthorized, Unavailable, VoucherNotFound};
use super::state::AppState;
use crate::ordering::place::NotTaken;
use crate::ordering::{Accepted, Order};
use actix_web::http::header;
use actix_web::{web, HttpMessage, HttpRequest, HttpResponse};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/vouchers/{id}/orders", web::post().to(place))
        .route("/vouchers/{id}/orders/mine", web::get().to(mine))
        .route("/orders/{order_id}", web::get().to(get))
        .route("/orders/{order_id}/pay", web::post().to(super::lifecycle::pay))
        .route("/orders/{order_id}/cancel", web::post().to(super::lifecycle::cancel));
}

fn not_found() -> ApiError {
    ApiError::not_found("order_not_found", "no such order")
}

#[utoipa::path(post, path = "/api/v1/vouchers/{id}/orders", tag = "orders", security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, description = "voucher id"),
        ("X-Admission-Token" = Option<String>, Header, description = "required for a sale whose `admission` is \
            `queue` or `raffle`: the token its queue or raffle gave the shopper")),
    responses((status = 202, description = "admitted; pending until the worker persists it", body = Accepted,
            headers(("Location" = String, description = "the order's status URL, /api/v1/orders/{order_id}"))),
        BadRequest, Unauthorized,
        (status = 403, body = ErrorBody, description = "forbidden: the token is not a shopper's; or, for a queue or \
            raffle sale, admission_required (no X-Admission-Token), admission_invalid (forged, another shopper's, \
            another sale's) or admission_expired"),
        VoucherNotFound,
        (status = 409, body = ErrorBody,
            description = "not_a_flash_sale, sale_not_started, sale_ended, sale_paused, sold_out, already_ordered \
                (with the shopper's existing `order_id` in `error`)"),
        RateLimited,
        (status = 503, body = ErrorBody, headers(("Retry-After" = u64, description = "seconds")),
            description = "unavailable: Redis cannot take the order now, or (with SECKILL_REDIS_WAIT_REPLICAS) \
                its reservation did not reach enough replicas in time. The order may still have been \
                admitted: GET /api/v1/vouchers/{id}/orders/mine tells, and a retry is safe (it answers \
                already_ordered if it was)")))]
// No span of its own (the hot path): the request's root span has the path, with
// the voucher id, and the caller's user id.
pub async fn place(
    req: HttpRequest,
    state: web::Data<AppState>,
    shopper: Shopper,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let caller = shopper.0;
    // The admission middleware counts only the refusals that never got here.
    req.extensions_mut().insert(super::rate_limits::HandlerRan);
    let voucher_id = path_id(&path)?;
    // A header that is not text is no token of this service.
    let token = req
        .headers()
        .get(ADMISSION_HEADER)
        .map(|t| t.to_str().unwrap_or_default());
    let placed = state
        .ordering
        .placer
        .take(voucher_id, caller.user(), token, || {
            state.http.rate_limits.check_user(caller.user_id)
        })
        .await;
    state.metrics.order(match &placed {
        Ok(_) => "accepted",
        Err(not) => not.outcome(),
    });
    let order_id = placed.map_err(|not| match not {
        NotTaken::Refused(refusal) => ApiError::from(refusal),
        NotTaken::Limited(limited) => limited,
    })?;
    Ok(HttpResponse::Accepted()
        .insert_header((header::LOCATION, format!("/api/v1/orders/{order_id}")))
        .json(Accepted::new(order_id)))
}

/// The header of an admission token.
pub const ADMISSION_HEADER: &str = "X-Admission-Token";

/// The most seconds a long poll may wait.
pub const MAX_WAIT_SECS: u32 = 30;

/// `?wait=SECONDS` of an order's lookup.
#[derive(serde::Deserialize)]
pub struct WaitQuery {
    wait: Option<u32>,
}

#[utoipa::path(get, path = "/api/v1/orders/{order_id}", tag = "orders", security(("bearer" = [])),
    params(("order_id" = i64, Path, minimum = 1, description = "order id"),
        ("wait" = Option<u32>, Query, minimum = 0, maximum = 30, description = "long poll: hold the request \
            until the order's status changes, for at most this many seconds (or SECKILL_MAX_WAIT_SECS, if shorter), then answer the status as it is")),
    responses((status = 200, description = "the order (its owner's, or any for an admin); a `pending` one with \
            `Retry-After`, the seconds to wait before asking again", body = Order,
            headers(("Retry-After" = Option<u64>, description = "seconds, on a pending order"))),
        BadRequest, Unauthorized, OrderNotFound, RateLimited,
        (status = 503, body = ErrorBody, headers(("Retry-After" = u64, description = "seconds")),
            description = "unavailable: the order's sale is being repaired, a dependency is down, or (with \
                `wait`) this instance holds as many long polls as it may (SECKILL_MAX_HELD_WAITS)")))]
#[tracing::instrument(skip_all, fields(order_id = %path))]
pub async fn get(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    query: web::Query<WaitQuery>,
) -> Result<HttpResponse, ApiError> {
    let order_id = path_order_id(&path)?;
    let wait = query.wait.unwrap_or(0);
    if wait > MAX_WAIT_SECS {
        return Err(ApiError::validation("wait", format!("at most {MAX_WAIT_SECS} seconds")));
    }
    let wait = wait.min(state.settings.http.max_wait_secs);
    if wait == 0 {
        return look_up(&state, &caller, order_id).await.map(answer);
    }
    let board = &state.ordering.lookup.board;
    let Ok(_held) = board.held.clone().try_acquire_owned() else {
        return Err(ApiError::unavailable(
            "this instance holds as many long polls as it may: poll without `wait`, or retry shortly",
            1,
        ));
    };
    let waiter = crate::ordering::status::waits::Waiter::new(board, order_id.get());
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(wait.into());
    let mut first: Option<String> = None;
    loop {
        // Armed before the look: a change announced after it wakes the wait below.
        let mut armed = std::pin::pin!(waiter.notified());
        armed.as_mut().enable();
        // Woken together, long polls take turns at the lookups (the board's
        // `looks`), not the pools all at once.
        let now = {
            // At the deadline or the stop the poll looks without waiting its turn.
            let _turn = tokio::select! {
                turn = board.looks.acquire() => turn.ok(),
                _ = tokio::time::sleep_until(deadline) => None,
                _ = board.closing.cancelled() => None,
            };
            look_up(&state, &caller, order_id).await?
        };
        let status = first.get_or_insert_with(|| now.status.clone());
        if *status != now.status || tokio::time::Instant::now() >= deadline || board.closing.is_cancelled() {
            return Ok(answer(now));
        }
        waiter.wait(armed, deadline).await;
    }
}

/// The order as its caller may see it: their own, or any for an admin.
async fn look_up(state: &AppState, caller: &Caller, order_id: crate::id::OrderId) -> Result<Order, ApiError> {
    let owner = (!caller.is_admin()).then_some(caller.user());
    match state.ordering.lookup.find_as(order_id, owner).await? {
        // Someone else's order looks exactly like a missing one.
        Some(o) if o.user_id == caller.user() || caller.is_admin() => Ok(o),
        _ => Err(not_found()),
    }
}

/// An order's answer; a pending one tells plain pollers when to ask again.
fn answer(o: Order) -> HttpResponse {
    let mut resp = HttpResponse::Ok();
    if o.status == "pending" {
        resp.insert_header((header::RETRY_AFTER, "1"));
    }
    resp.json(o)
}

#[utoipa::path(get, path = "/api/v1/vouchers/{id}/orders/mine", tag = "orders", security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, description = "voucher id")),
    responses((status = 200, description = "the caller's order for the voucher; a `pending` one with \
            `Retry-After`", body = Order,
            headers(("Retry-After" = Option<u64>, description = "seconds, on a pending order"))),
        BadRequest, Unauthorized, Forbidden, OrderNotFound, RateLimited, Unavailable))]
#[tracing::instrument(skip_all, fields(voucher_id = %path))]
pub async fn mine(
    state: web::Data<AppState>,
    Shopper(caller): Shopper,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let voucher_id = path_id(&path)?;
    let order = state.ordering.lookup.mine_as(voucher_id, caller.user()).await?;
    order.map(answer).ok_or_else(not_found)
}
