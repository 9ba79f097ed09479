//! The waiting room of a `queue` sale: joining and polling a place (`src/admit`).
use super::auth::Shopper;
use super::challenge::{first_proof, proof_of_work, Proof};
use super::client_addr::{cap_of, cap_reached};
use super::error::ApiError;
use super::error::ErrorBody;
use super::path::path_id;
use super::responses::{BadRequest, RateLimited, Unauthorized, Unavailable, VoucherNotFound};
use super::state::AppState;
use super::vouchers::sale;
use crate::admission::advance::Frontier;
use crate::admission::queue;
use crate::admission::Mode;
use crate::sales::model::{FlashSale, Voucher};
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use utoipa::ToSchema;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/vouchers/{id}/queue", web::post().to(join_queue))
        .route("/vouchers/{id}/queue/me", web::get().to(queue_me));
}

/// The header of a queue ticket.
pub const TICKET_HEADER: &str = "X-Queue-Ticket";

/// A shopper's place in a queue.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct QueueStatus {
    /// Send it back in `X-Queue-Ticket` when polling: the place it holds needs no lookup.
    pub ticket: String,
    /// `waiting_for_start` (joined before `begin_at`: places are drawn at the
    /// start), `waiting`, `admitted` (order with `admission_token` before
    /// `turn_ends_at`), `turn_ended`, `closed` (the sale has ended).
    pub state: String,
    /// 1-based; null until the early arrivals are drawn.
    pub place: Option<i64>,
    /// Shoppers ahead still waiting (0 once admitted).
    pub position: Option<i64>,
    /// Places admitted so far.
    pub admitted_upto: i64,
    /// Shoppers admitted a second now.
    pub admit_rate: i32,
    /// At the current rate, seconds until the place is admitted (0 once
    /// admitted; longer while the frontier is held for the stock).
    pub estimated_wait_secs: Option<f64>,
    /// Whether the frontier is held: the admitted shoppers could take every unit left.
    pub held: bool,
    /// For `POST /api/v1/vouchers/{id}/orders` (header `X-Admission-Token`).
    pub admission_token: Option<String>,
    pub turn_ends_at: Option<DateTime<Utc>>,
}

impl QueueStatus {
    /// `place` (with its `ticket`) waiting behind frontier `f`, as far as is
    /// known before its turn is looked at.
    fn waiting(ticket: String, place: Option<i64>, f: &Frontier) -> Self {
        Self {
            ticket,
            state: "waiting".into(),
            place,
            position: None,
            admitted_upto: f.admitted,
            admit_rate: f.admit_rate,
            estimated_wait_secs: None,
            held: f.held,
            admission_token: None,
            turn_ends_at: None,
        }
    }
}

fn not_a_queue() -> ApiError {
    ApiError::conflict("not_a_queue", "this sale has no queue (its admission is not `queue`)")
}

/// The queue's frontier now (this instance's, at most [`crate::admission::frontier::REFRESH`] old);
/// the background tick moves it too (`crate::app`'s queue task).
pub async fn frontier_of(state: &AppState, voucher: &Voucher, flash: &FlashSale) -> Result<Frontier, ApiError> {
    let (id, shards, turn) = (voucher.typed_id(), flash.shards(), flash.turn_secs.unwrap_or(300));
    // Read when the frontier may move, after the live orders are counted.
    let units = || async { Ok(state.sales.remaining(id, shards).await?.unwrap_or(0)) };
    Ok(state.admit.frontier(id, flash.begin_at, i64::from(turn), units).await?)
}

async fn status(
    state: &AppState,
    voucher: &Voucher,
    flash: &FlashSale,
    user: crate::id::UserId,
    place: Option<i64>,
) -> Result<QueueStatus, ApiError> {
    let now = state.clock.now();
    let f = frontier_of(state, voucher, flash).await?;
    // Drawn since the ticket was made: look the place up once.
    let place = match place {
        None if f.sealed => state.admit.place_of(voucher.typed_id(), user).await?.flatten(),
        p => p,
    };
    let exp = flash.end_at.timestamp().max(0) as u64 + 60;
    let ticket = state.admit.signer.ticket(user.get(), voucher.id, place, exp);
    let mut s = QueueStatus::waiting(ticket, place, &f);
    let Some(place) = place else {
        s.state = "waiting_for_start".into();
        return Ok(s);
    };
    if now >= flash.end_at {
        s.state = "closed".into();
        return Ok(s);
    }
    if place > f.admitted {
        let ahead = place - f.admitted - 1;
        s.position = Some(ahead);
        s.estimated_wait_secs = Some((ahead + 1) as f64 / f64::from(f.admit_rate.max(1)));
        return Ok(s);
    }
    s.position = Some(0);
    s.estimated_wait_secs = Some(0.0);
    let Some(turn) = state.admit.turn_of(voucher.typed_id(), place).await? else {
        return Ok(s);
    };
    // The turn counts the time the sale was not paused: while it is, the end
    // moves with the pause.
    let left = f64::from(flash.turn_secs.unwrap_or(300)) - turn.used_secs;
    let ends = (now + Duration::milliseconds((left * 1000.0) as i64)).min(flash.end_at);
    s.turn_ends_at = Some(ends);
    if left <= 0.0 || now >= ends {
        s.state = "turn_ended".into();
        return Ok(s);
    }
    s.state = "admitted".into();
    // Valid to the second before the turn ends (a token is good through the second
    // its `exp` names), and longer by every pause of the sale after it was made.
    let exp = (ends.timestamp() - 1).max(0) as u64;
    let paused_ms = (turn.paused_secs * 1000.0) as i64;
    s.admission_token = Some(
        state
            .admit
            .signer
            .admission_token(user.get(), voucher.id, exp, Some(paused_ms)),
    );
    Ok(s)
}

#[utoipa::path(post, path = "/api/v1/vouchers/{id}/queue", tag = "admission", security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, description = "voucher id"),
        ("X-Altcha" = Option<String>, Header, description = "the solved challenge, when the sale asks a proof of work")),
    responses((status = 201, description = "joined: the new place (before `begin_at`: drawn at the start)", body = QueueStatus),
        (status = 200, description = "the caller's place already (one place per shopper)", body = QueueStatus),
        BadRequest, Unauthorized,
        (status = 403, body = ErrorBody, description = "forbidden; address_cap_reached (the sale's cap on one client address); proof_of_work_required, proof_of_work_invalid \
            (wrong, another sale's or shopper's, expired, or below the sale's difficulty)"),
        VoucherNotFound,
        (status = 409, body = ErrorBody, description = "not_a_flash_sale, not_a_queue, sale_ended"),
        RateLimited, Unavailable))]
#[tracing::instrument(skip_all, fields(voucher_id = %path, user_id = caller.user_id))]
pub async fn join_queue(
    req: HttpRequest,
    state: web::Data<AppState>,
    Shopper(caller): Shopper,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = path_id(&path)?;
    let (voucher, flash) = sale(&state, id).await?;
    if flash.admission != Mode::Queue {
        return Err(not_a_queue());
    }
    if state.clock.now() >= flash.end_at {
        return Err(ApiError::conflict("sale_ended", "the sale has ended"));
    }
    // A proof of work sent is checked first: a forged one costs no query.
    let proof = first_proof(&req, &state, id.get(), caller.user_id, &flash)?;
    // One place per shopper: a shopper who has one gets it back without paying
    // again (an expired proof sent with the request does not matter then).
    let had = state.admit.place_of(id, caller.user()).await?;
    if had.is_none() {
        match proof {
            Proof::Good => {}
            Proof::Stale(refused) => return Err(refused),
            Proof::Absent => proof_of_work(&req, &state, id.get(), caller.user_id, &flash)?,
        }
    }
    let cap = cap_of(&req, &state.settings.http.trusted_proxies, &flash);
    let joined = state
        .admit
        .join(id, caller.user(), flash.begin_at, cap.as_ref())
        .await?
        .map_err(|refused| match refused {
            queue::NotJoined::Sealing => ApiError::unavailable(
                "the queue is busy (at the start, its early arrivals are being given their places): try again in \
                 a moment",
                1,
            ),
            queue::NotJoined::AddressCap => cap_reached(flash.address_cap.unwrap_or(0), "places"),
        })?;
    let status = status(&state, &voucher, &flash, caller.user(), joined.place).await?;
    let code = if joined.new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(HttpResponse::build(code).json(status))
}

#[utoipa::path(get, path = "/api/v1/vouchers/{id}/queue/me", tag = "admission", security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, description = "voucher id"),
        ("X-Queue-Ticket" = Option<String>, Header, description = "the ticket of the last answer (optional: without \
            it the place is looked up)")),
    responses((status = 200, description = "the caller's place, and an admission token once admitted", body = QueueStatus),
        BadRequest, Unauthorized,
        (status = 403, body = ErrorBody, description = "forbidden; ticket_invalid: the ticket is forged, another \
            shopper's or another sale's"),
        (status = 404, body = ErrorBody, description = "voucher_not_found; not_in_queue"),
        (status = 409, body = ErrorBody, description = "not_a_flash_sale, not_a_queue"),
        RateLimited, Unavailable))]
#[tracing::instrument(skip_all, fields(voucher_id = %path, user_id = caller.user_id))]
pub async fn queue_me(
    req: HttpRequest,
    state: web::Data<AppState>,
    Shopper(caller): Shopper,
    path: web::Path<String>,
) -> Result<web::Json<QueueStatus>, ApiError> {
    let id = path_id(&path)?;
    let (voucher, flash) = sale(&state, id).await?;
    if flash.admission != Mode::Queue {
        return Err(not_a_queue());
    }
    let from_ticket = match req.headers().get(TICKET_HEADER) {
        None => None,
        Some(t) => match state.admit.signer.read_ticket(
            t.to_str().unwrap_or_default(),
            caller.user_id,
            id.get(),
            state.clock.unix_secs(),
        ) {
            Ok(place) => Some(place),
            // An old ticket says nothing wrong: look the place up.
            Err(crate::admission::token::Refused::Expired) => None,
            Err(crate::admission::token::Refused::Invalid(why)) => {
                return Err(ApiError::new(StatusCode::FORBIDDEN, "ticket_invalid", why))
            }
        },
    };
    let place = match from_ticket {
        Some(place) => place,
        None => state
            .admit
            .place_of(id, caller.user())
            .await?
            .ok_or_else(|| ApiError::not_found("not_in_queue", "the caller has not joined this queue"))?,
    };
    Ok(web::Json(status(&state, &voucher, &flash, caller.user(), place).await?))
}
