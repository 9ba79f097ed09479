//! The raffle of a `raffle` sale: entering, the public commitment, seed, entries
//! and winners, and a shopper's own result with its admission token.
mod bodies;

use super::auth::Shopper;
use super::challenge::proof_of_work;
use super::error::ApiError;
use super::error::ErrorBody;
use super::path::path_id;
use super::responses::{BadRequest, BodyRefused, Forbidden, RateLimited, Unauthorized, Unavailable, VoucherNotFound};
use super::state::AppState;
use super::vouchers::sale;
use crate::admission::draw::Submitted;
use crate::admission::raffle::{Entered, Summary};
use crate::admission::Mode;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use chrono::Duration;
use serde_json::Value;

pub use bodies::{BeaconRound, EntriesQuery, EntryPage, MyEntry};

/// How long a winner's admission token lasts (a poll gives a new one).
const WINNER_TOKEN_SECS: i64 = 300;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/vouchers/{id}/raffle", web::get().to(raffle_summary))
        .route("/vouchers/{id}/raffle/entries", web::post().to(enter_raffle))
        .route("/vouchers/{id}/raffle/entries", web::get().to(raffle_entries))
        .route("/vouchers/{id}/raffle/me", web::get().to(raffle_me))
        .route("/vouchers/{id}/raffle/beacon", web::post().to(submit_beacon));
}

fn closed() -> ApiError {
    ApiError::conflict("raffle_closed", "entries closed at draw_at")
}

fn not_a_raffle() -> ApiError {
    ApiError::conflict(
        "not_a_raffle",
        "this sale has no raffle (its admission is not `raffle`)",
    )
}

async fn raffle_sale(state: &AppState, id: crate::id::VoucherId) -> Result<crate::sales::model::FlashSale, ApiError> {
    let (_, flash) = sale(state, id).await?;
    if flash.admission != Mode::Raffle {
        return Err(not_a_raffle());
    }
    Ok(flash)
}

#[utoipa::path(post, path = "/api/v1/vouchers/{id}/raffle/entries", tag = "admission", security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, description = "voucher id"),
        ("X-Altcha" = Option<String>, Header, description = "the solved challenge, when the sale asks a proof of work")),
    responses((status = 201, description = "entered", body = MyEntry),
        (status = 200, description = "the caller had entered already (one entry per shopper)", body = MyEntry),
        BadRequest, Unauthorized,
        (status = 403, body = ErrorBody, description = "forbidden; address_cap_reached (the sale's cap on one client address); proof_of_work_required, proof_of_work_invalid"),
        VoucherNotFound,
        (status = 409, body = ErrorBody, description = "not_a_flash_sale, not_a_raffle, raffle_closed (past draw_at)"),
        RateLimited, Unavailable))]
#[tracing::instrument(skip_all, fields(voucher_id = %path, user_id = caller.user_id))]
pub async fn enter_raffle(
    req: HttpRequest,
    state: web::Data<AppState>,
    Shopper(caller): Shopper,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = path_id(&path)?;
    let flash = raffle_sale(&state, id).await?;
    // A proof of work sent is checked first: a forged one costs no query.
    let proof = super::challenge::first_proof(&req, &state, id.get(), caller.user_id, &flash)?;
    // Entered already: the entry, with no lock taken (a crowd of repeat entries
    // must not hold the raffle's row against its close).
    if state.admit.raffle_entry(id, caller.user()).await?.is_some() {
        return Ok(HttpResponse::Ok().json(mine(&state, id, caller.user(), &flash).await?));
    }
    if flash.draw_at.is_some_and(|at| state.clock.now() >= at) {
        return Err(closed());
    }
    match proof {
        super::challenge::Proof::Good => {}
        super::challenge::Proof::Stale(refused) => return Err(refused),
        super::challenge::Proof::Absent => proof_of_work(&req, &state, id.get(), caller.user_id, &flash)?,
    }
    let cap = super::client_addr::cap_of(&req, &state.settings.http.trusted_proxies, &flash);
    let code = match state.admit.enter(id, caller.user(), cap.as_ref()).await? {
        Entered::New(_) => StatusCode::CREATED,
        Entered::Already(_) => StatusCode::OK,
        Entered::Closed => return Err(closed()),
        Entered::AddressCap => {
            return Err(super::client_addr::cap_reached(
                flash.address_cap.unwrap_or(0),
                "entries",
            ))
        }
    };
    Ok(HttpResponse::build(code).json(mine(&state, id, caller.user(), &flash).await?))
}

async fn mine(
    state: &AppState,
    id: crate::id::VoucherId,
    user: crate::id::UserId,
    flash: &crate::sales::model::FlashSale,
) -> Result<MyEntry, ApiError> {
    let (entry, won) = state
        .admit
        .raffle_entry(id, user)
        .await?
        .ok_or_else(|| ApiError::not_found("not_entered", "the caller has not entered this raffle"))?;
    let mut me = MyEntry {
        entry,
        draw_at: flash.draw_at.unwrap_or(flash.begin_at),
        drawn: won.is_some(),
        won,
        admission_token: None,
        admission_expires_at: None,
    };
    let now = state.clock.now();
    if won == Some(true) && now < flash.end_at {
        let exp = (now + Duration::seconds(WINNER_TOKEN_SECS)).min(flash.end_at);
        me.admission_token = Some(state.admit.signer.admission_token(
            user.get(),
            id.get(),
            exp.timestamp().max(0) as u64,
            None,
        ));
        me.admission_expires_at = Some(exp);
    }
    Ok(me)
}

#[utoipa::path(get, path = "/api/v1/vouchers/{id}/raffle/me", tag = "admission", security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, description = "voucher id")),
    responses((status = 200, description = "the caller's entry and, after the draw, whether it won (a winner's \
            admission token with it)", body = MyEntry),
        BadRequest, Unauthorized, Forbidden,
        (status = 404, body = ErrorBody, description = "voucher_not_found; not_entered"),
        (status = 409, body = ErrorBody, description = "not_a_flash_sale, not_a_raffle"),
        RateLimited, Unavailable))]
#[tracing::instrument(skip_all, fields(voucher_id = %path, user_id = caller.user_id))]
pub async fn raffle_me(
    state: web::Data<AppState>,
    Shopper(caller): Shopper,
    path: web::Path<String>,
) -> Result<web::Json<MyEntry>, ApiError> {
    let id = path_id(&path)?;
    let flash = raffle_sale(&state, id).await?;
    Ok(web::Json(mine(&state, id, caller.user(), &flash).await?))
}

#[utoipa::path(get, path = "/api/v1/vouchers/{id}/raffle", tag = "admission",
    params(("id" = i64, Path, minimum = 1, description = "voucher id")),
    responses((status = 200, description = "the raffle: its commitment from the start; after `draw_at` the seed, \
            and how to recompute the winners from it and the entries", body = Summary),
        BadRequest, VoucherNotFound,
        (status = 409, body = ErrorBody, description = "not_a_flash_sale, not_a_raffle"),
        RateLimited, Unavailable))]
#[tracing::instrument(skip_all, fields(voucher_id = %path))]
pub async fn raffle_summary(
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<web::Json<Summary>, ApiError> {
    let id = path_id(&path)?;
    raffle_sale(&state, id).await?;
    let summary = state.admit.cached_raffle_summary(id).await?;
    Ok(web::Json(summary))
}

#[utoipa::path(get, path = "/api/v1/vouchers/{id}/raffle/entries", tag = "admission",
    params(("id" = i64, Path, minimum = 1, description = "voucher id"),
        ("after" = Option<String>, Query, pattern = "^[0-9a-f]{64}$", description = "only entries after this one (the previous page's next_after)"),
        ("limit" = Option<i32>, Query, minimum = 1, maximum = 1000, description = "page size, default 1000"),
        ("won" = Option<bool>, Query, description = "true: only the winners")),
    responses((status = 200, description = "the entries in entry order, each with whether it won (null before the draw)", body = EntryPage),
        BadRequest, VoucherNotFound,
        (status = 409, body = ErrorBody, description = "not_a_flash_sale, not_a_raffle"),
        RateLimited, Unavailable))]
#[tracing::instrument(skip_all, fields(voucher_id = %path))]
pub async fn raffle_entries(
    state: web::Data<AppState>,
    path: web::Path<String>,
    q: web::Query<EntriesQuery>,
) -> Result<web::Json<EntryPage>, ApiError> {
    let id = path_id(&path)?;
    let (after, limit, won) = q.checked()?;
    raffle_sale(&state, id).await?;
    let items = state.admit.raffle_entries(id, after, limit, won).await?;
    let next_after = (items.len() as i64 == limit)
        .then(|| items.last().map(|e| e.entry.clone()))
        .flatten();
    Ok(web::Json(EntryPage { items, next_after }))
}

#[utoipa::path(post, path = "/api/v1/vouchers/{id}/raffle/beacon", tag = "admission",
    params(("id" = i64, Path, minimum = 1, description = "voucher id")),
    request_body = BeaconRound,
    responses((status = 202, description = "the signature verifies against the sale's chain: the draw follows in \
            the background (poll `GET .../raffle` for `drawn`)", body = Summary),
        BadRequest,
        VoucherNotFound,
        (status = 409, body = ErrorBody, description = "not_a_flash_sale, not_a_raffle; raffle_open: before \
            draw_at; beacon_round_mismatch: not the round the sale named; no_beacon: a raffle drawn before beacons"),
        BodyRefused,
        (status = 422, body = ErrorBody, description = "beacon_invalid: not the chain's signature of the round"),
        RateLimited, Unavailable))]
#[tracing::instrument(skip_all, fields(voucher_id = %path))]
pub async fn submit_beacon(
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let id = path_id(&path)?;
    let given = BeaconRound::parse(&body)?;
    raffle_sale(&state, id).await?;
    let new = match state.admit.submit_beacon(id, given.round, &given.signature).await? {
        Submitted::Accepted { new } => new,
        Submitted::Open => {
            return Err(ApiError::conflict(
                "raffle_open",
                "entries are open until draw_at: the beacon comes after",
            ))
        }
        Submitted::WrongRound(round) => {
            return Err(ApiError::conflict(
                "beacon_round_mismatch",
                format!("this raffle draws with round {round}, named at its creation"),
            ))
        }
        Submitted::BadSignature => {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "beacon_invalid",
                "not the chain's signature of this round",
            ))
        }
        Submitted::WithoutBeacon => {
            return Err(ApiError::conflict(
                "no_beacon",
                "this raffle was drawn before beacons, by its seed alone",
            ))
        }
    };
    // The draw runs apart from this request (and from every other): one instance
    // does it, the others skip it. Started once, by the submission that stored the
    // signature (the background tick is there for the rest).
    if new {
        state.admit.draw_soon(id);
    }
    let summary = state.admit.raffle_summary(id).await?;
    Ok(HttpResponse::Accepted().json(summary))
}
