//! `POST /api/v1/admin/vouchers/{id}/stock`: a top-up of a running sale, with an
//! optional `Idempotency-Key` ([`super::idempotency`]).
//!
//! Postgres first (stock, total and a pending top-up in one transaction), then
//! Redis ([`crate::sales::topup`]). Once committed the top-up stands whatever
//! fails afterwards, so the answer is 200 and final; with a key, a retry gets that
//! answer (rebuilt from the top-up if the first request could not store it) and
//! adds nothing.
use super::auth::Admin;
use super::error::ApiError;
use super::error::ErrorBody;
use super::idempotency::{self, Claim};
use super::path::path_id;
use super::responses::{BadRequest, BodyRefused, Forbidden, RateLimited, Unauthorized, Unavailable, VoucherNotFound};
use super::state::AppState;
use super::vouchers::{voucher_not_found, with_stats};
use crate::sales::model::{AddStock, MAX_STOCK};
use crate::sales::topup::{NotRecorded, TopUp};
use crate::sales::view::{TopUpView, ToppedUp};
use crate::sales::Voucher;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::Value;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/admin/vouchers/{id}/stock", web::post().to(add_stock));
}

#[utoipa::path(post, path = "/api/v1/admin/vouchers/{id}/stock", tag = "admin", security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, description = "voucher id"),
        ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255, pattern = "^[!-~]+$",
            description = "a retry with the same key and body answers as the first request did and adds nothing")),
    request_body = AddStock,
    responses((status = 200, description = "the voucher, its sale's numbers and the top-up (final: retry only with the same Idempotency-Key)", body = ToppedUp),
        BadRequest, Unauthorized, Forbidden, VoucherNotFound,
        (status = 409, body = ErrorBody,
            description = "not_a_flash_sale; stock_limit_exceeded: the voucher's stock plus `add` would exceed 100,000,000; \
                raffle_closed: a raffle past its draw_at (its winners are as many as its stock then)"),
        BodyRefused,
        (status = 422, body = ErrorBody, description = "idempotency_key_reused: the Idempotency-Key was sent before with another request"),
        RateLimited, Unavailable))]
#[tracing::instrument(skip_all)]
pub async fn add_stock(
    req: HttpRequest,
    state: web::Data<AppState>,
    admin: Admin,
    path: web::Path<String>,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let id = path_id(&path)?;
    let add = AddStock::parse(&body)?.add;
    let key = idempotency::key_of(&req)?;
    let admin = admin.0.user_id;
    let mut tx = state.sales.begin().await?;
    if let Some(key) = &key {
        match idempotency::claim(&mut tx, admin, key, &idempotency::fingerprint(&req, &body)).await? {
            Claim::New => {}
            Claim::Replay { status, body } => return Ok(HttpResponse::build(status).json(body)),
            Claim::Unanswered { top_up_id } => {
                drop(tx);
                return answer_unanswered(&state, admin, key, top_up_id).await;
            }
        }
    }
    let (top_up, voucher) = state.sales.record_top_up(&mut tx, id, add).await?.map_err(refusal)?;
    if let Some(key) = &key {
        idempotency::note_top_up(&mut tx, admin, key, top_up.id).await?;
    }
    tx.commit().await?;
    // Committed: the top-up happens whatever fails from here on, and the answer is
    // 200 (without a key, a retry would add the units twice).
    let answer = finish(&state, top_up, voucher).await;
    if let Some(key) = &key {
        let value = serde_json::to_value(&answer).map_err(anyhow::Error::from)?;
        match state.http.answers.answer(admin, key, StatusCode::OK, &value).await {
            Ok(stored) => return Ok(HttpResponse::Ok().json(stored)),
            // Committed all the same; a retry with the key rebuilds this answer.
            Err(e) => tracing::warn!(top_up = top_up.id, error = %e, "could not store a top-up's answer"),
        }
    }
    Ok(HttpResponse::Ok().json(answer))
}

/// A retry of a request whose top-up was committed but whose answer was not
/// stored: the answer rebuilt from the top-up, stored now.
async fn answer_unanswered(
    state: &AppState,
    admin: i64,
    key: &str,
    top_up_id: Option<i64>,
) -> Result<HttpResponse, ApiError> {
    let top_up_id = top_up_id
        .ok_or_else(|| ApiError::internal(anyhow::anyhow!("an idempotency key of a top-up without its top-up")))?;
    let top_up = state.sales.top_up(top_up_id).await?.ok_or_else(voucher_not_found)?;
    let voucher = state
        .sales
        .get(crate::id::VoucherId::new(top_up.voucher_id))
        .await?
        .ok_or_else(voucher_not_found)?;
    let answer = serde_json::to_value(finish(state, top_up, voucher).await).map_err(anyhow::Error::from)?;
    let stored = state.http.answers.answer(admin, key, StatusCode::OK, &answer).await?;
    Ok(HttpResponse::Ok().json(stored))
}

/// Why no top-up was recorded, as the API says it.
fn refusal(not: NotRecorded) -> ApiError {
    match not {
        NotRecorded::NotFound => voucher_not_found(),
        NotRecorded::NotAFlashSale => ApiError::conflict("not_a_flash_sale", "this voucher has no stock to add to"),
        // Its winners are as many as its stock when the entries closed.
        NotRecorded::RaffleClosed => ApiError::conflict(
            "raffle_closed",
            "a raffle's stock is fixed when its entries close (draw_at)",
        ),
        // A valid `add` that the voucher's stock leaves no room for: a conflict with
        // the voucher's state, not a malformed request.
        NotRecorded::OverLimit => ApiError::conflict(
            "stock_limit_exceeded",
            format!("add: the total stock would exceed {MAX_STOCK}"),
        ),
    }
}

/// After the commit: the Redis half (or the recovery pass), the announcement and
/// the answer. Nothing here fails: the top-up stands.
async fn finish(state: &AppState, top_up: TopUp, voucher: Voucher) -> ToppedUp {
    let applied = match state.sales.apply_top_up(top_up.id).await {
        Ok(applied) => applied,
        Err(e) => {
            tracing::warn!(top_up = top_up.id, error = %format!("{e:#}"), "top-up left pending for recovery");
            false
        }
    };
    state.sales.announce(&voucher).await;
    // The numbers may not be readable (Redis away): the top-up stands all the same.
    let stats = with_stats(state, voucher.clone()).await.ok().map(|v| v.stats);
    ToppedUp {
        voucher,
        stats,
        top_up: TopUpView {
            id: top_up.id,
            units: top_up.units,
            applied,
        },
    }
}
