//! What a `queue` or `raffle` sale asks before joining or entering: the sale
//! itself (from the cache, else Postgres), and the proof of work, with the
//! ALTCHA challenge route.
use super::auth::Shopper;
use super::error::ApiError;
use super::error::ErrorBody;
use super::path::path_id;
use super::responses::{BadRequest, Forbidden, RateLimited, Unauthorized, Unavailable, VoucherNotFound};
use super::state::AppState;
use super::vouchers::sale;
use crate::admission::pow::Challenge;
use crate::sales::model::FlashSale;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/vouchers/{id}/challenge", web::get().to(challenge));
}

/// The header of a proof of work (an ALTCHA payload).
pub const POW_HEADER: &str = "X-Altcha";

/// A proof of work sent, checked before anything is read ([`first_proof`]).
pub(super) enum Proof {
    /// None sent.
    Absent,
    /// Good, or the sale asks none.
    Good,
    /// The service's own challenge, solved, but expired or too easy now: good
    /// enough to ask again for a place or entry the shopper has, refused for a new one.
    Stale(ApiError),
}

/// The proof of work the request sends, checked before any query: a forged,
/// wrong or someone else's one is refused at once (403 `proof_of_work_invalid`).
pub(super) fn first_proof(
    req: &HttpRequest,
    state: &AppState,
    sale: i64,
    user: i64,
    flash: &FlashSale,
) -> Result<Proof, ApiError> {
    if !req.headers().contains_key(POW_HEADER) {
        return Ok(Proof::Absent);
    }
    match check(req, state, sale, user, flash) {
        Ok(()) => Ok(Proof::Good),
        Err(crate::admission::pow::Refused::Stale(why)) => Ok(Proof::Stale(invalid(why))),
        Err(refused) => Err(refused_error(refused)),
    }
}

/// For a sale asking a proof of work: the caller's, valid for this sale now.
pub(super) fn proof_of_work(
    req: &HttpRequest,
    state: &AppState,
    sale: i64,
    user: i64,
    flash: &FlashSale,
) -> Result<(), ApiError> {
    check(req, state, sale, user, flash).map_err(refused_error)
}

fn invalid(why: &'static str) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "proof_of_work_invalid", why)
}

fn refused_error(refused: crate::admission::pow::Refused) -> ApiError {
    use crate::admission::pow::Refused;
    match refused {
        Refused::Missing => ApiError::new(
            StatusCode::FORBIDDEN,
            "proof_of_work_required",
            "this sale asks a proof of work: solve GET /api/v1/vouchers/{id}/challenge and send it in X-Altcha",
        ),
        Refused::Invalid(why) | Refused::Stale(why) => invalid(why),
    }
}

fn check(
    req: &HttpRequest,
    state: &AppState,
    sale: i64,
    user: i64,
    flash: &FlashSale,
) -> Result<(), crate::admission::pow::Refused> {
    if flash.pow_difficulty <= 0 {
        return Ok(());
    }
    let Some(payload) = req.headers().get(POW_HEADER) else {
        return Err(crate::admission::pow::Refused::Missing);
    };
    let payload = payload.to_str().unwrap_or_default();
    state.admit.signer.check_solution(
        payload,
        sale,
        user,
        i64::from(flash.pow_difficulty),
        state.clock.unix_secs(),
    )
}

#[utoipa::path(get, path = "/api/v1/vouchers/{id}/challenge", tag = "admission", security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, description = "voucher id")),
    responses((status = 200, description = "an ALTCHA challenge for the caller and this sale, valid ten minutes: \
            find `number` in 0..=maxnumber with hex(SHA-256(salt + number)) = challenge, then send base64 of \
            {algorithm, challenge, number, salt, signature} in X-Altcha when joining the queue or entering the raffle",
            body = Challenge),
        BadRequest, Unauthorized, Forbidden, VoucherNotFound,
        (status = 409, body = ErrorBody, description = "not_a_flash_sale; no_proof_of_work: the sale asks none"),
        RateLimited, Unavailable))]
#[tracing::instrument(skip_all, fields(voucher_id = %path))]
pub async fn challenge(
    state: web::Data<AppState>,
    Shopper(caller): Shopper,
    path: web::Path<String>,
) -> Result<web::Json<Challenge>, ApiError> {
    let id = path_id(&path)?;
    let (_, flash) = sale(&state, id).await?;
    if !flash.admission.gated() || flash.pow_difficulty <= 0 {
        return Err(ApiError::conflict(
            "no_proof_of_work",
            "this sale asks no proof of work",
        ));
    }
    Ok(web::Json(state.admit.signer.challenge(
        id.get(),
        caller.user_id,
        i64::from(flash.pow_difficulty),
        state.clock.unix_secs(),
    )))
}
