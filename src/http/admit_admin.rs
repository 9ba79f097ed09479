//! The admin's view of a sale's admission (the console polls it) and the live
//! change of a queue's admit rate.
use super::auth::Admin;
use super::error::ApiError;
use super::error::ErrorBody;
use super::path::path_id;
use super::responses::{BadRequest, BodyRefused, Forbidden, RateLimited, Unauthorized, Unavailable, VoucherNotFound};
use super::state::AppState;
use super::vouchers::sale;
use super::waiting::frontier_of;
use crate::admission::advance::{Admitted, Frontier};
use crate::admission::raffle::{Summary, Winner};
use crate::admission::Mode;
use crate::sales::model::MAX_ADMIT_RATE;
use crate::validate::{self, required, whole};
use actix_web::web;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// How many admitted shoppers, or winners, the view lists.
const LISTED: i64 = 50;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/admin/vouchers/{id}/admission", web::get().to(admission_view))
        .route("/admin/vouchers/{id}/admission", web::post().to(set_admit_rate));
}

/// A validated `POST /api/v1/admin/vouchers/{id}/admission` body: a queue's
/// shoppers admitted per second from now on.
#[derive(Clone, Copy, Debug, ToSchema)]
pub struct SetRate {
    #[schema(minimum = 1, maximum = 1_000_000)]
    pub admit_rate: i32,
}

impl SetRate {
    pub fn parse(body: &Value) -> Result<Self, crate::validate::ValidationError> {
        let obj = validate::object(body)?;
        Ok(Self {
            admit_rate: whole(required(obj, "admit_rate")?, "admit_rate", 1, MAX_ADMIT_RATE)? as i32,
        })
    }
}

/// A queue, for the admin.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct QueueView {
    #[serde(flatten)]
    pub frontier: Frontier,
    pub turn_secs: i32,
    /// The last shoppers admitted, latest first (at most 50).
    pub recent_admitted: Vec<Admitted>,
}

/// A raffle, for the admin.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct RaffleView {
    #[serde(flatten)]
    pub summary: Summary,
    /// The first winners in entry order, with their shoppers (at most 50).
    pub winners_listed: Vec<Winner>,
}

/// A sale's admission, for the admin.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct AdmissionView {
    pub admission: Mode,
    pub pow_difficulty: i32,
    /// For a `queue` sale.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueView>,
    /// For a `raffle` sale.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raffle: Option<RaffleView>,
}

async fn build_view(state: &AppState, id: crate::id::VoucherId) -> Result<AdmissionView, ApiError> {
    let (voucher, flash) = sale(state, id).await?;
    let mut view = AdmissionView {
        admission: flash.admission,
        pow_difficulty: flash.pow_difficulty,
        queue: None,
        raffle: None,
    };
    match flash.admission {
        Mode::FirstCome => {}
        Mode::Queue => {
            let frontier = frontier_of(state, &voucher, &flash).await?;
            view.queue = Some(QueueView {
                frontier,
                turn_secs: flash.turn_secs.unwrap_or(300),
                recent_admitted: state.admit.recent_admitted(id, frontier.admitted, LISTED).await?,
            });
        }
        Mode::Raffle => {
            view.raffle = Some(RaffleView {
                summary: state.admit.raffle_summary(id).await?,
                winners_listed: state.admit.winners_of(id, LISTED).await?,
            });
        }
    }
    Ok(view)
}

#[utoipa::path(get, path = "/api/v1/admin/vouchers/{id}/admission", tag = "admin", security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, description = "voucher id")),
    responses((status = 200, description = "the sale's admission: a queue's length, frontier, rate and the last \
            shoppers admitted; a raffle's commitment, seed, entries and winners", body = AdmissionView),
        BadRequest, Unauthorized, Forbidden, VoucherNotFound,
        (status = 409, body = ErrorBody, description = "not_a_flash_sale"),
        RateLimited, Unavailable))]
#[tracing::instrument(skip_all, fields(voucher_id = %path))]
pub async fn admission_view(
    state: web::Data<AppState>,
    _admin: Admin,
    path: web::Path<String>,
) -> Result<web::Json<AdmissionView>, ApiError> {
    let id = path_id(&path)?;
    Ok(web::Json(build_view(&state, id).await?))
}

#[utoipa::path(post, path = "/api/v1/admin/vouchers/{id}/admission", tag = "admin", security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, description = "voucher id")),
    request_body = SetRate,
    responses((status = 200, description = "the sale's admission, at the new rate", body = AdmissionView),
        BadRequest, Unauthorized, Forbidden, VoucherNotFound,
        (status = 409, body = ErrorBody, description = "not_a_flash_sale, not_a_queue"),
        BodyRefused, RateLimited, Unavailable))]
#[tracing::instrument(skip_all, fields(voucher_id = %path))]
pub async fn set_admit_rate(
    state: web::Data<AppState>,
    _admin: Admin,
    path: web::Path<String>,
    body: web::Json<Value>,
) -> Result<web::Json<AdmissionView>, ApiError> {
    let id = path_id(&path)?;
    let rate = SetRate::parse(&body)?.admit_rate;
    let (voucher, flash) = sale(&state, id).await?;
    if flash.admission != Mode::Queue {
        return Err(ApiError::conflict(
            "not_a_queue",
            "this sale has no queue (its admission is not `queue`)",
        ));
    }
    // The frontier moves at the old rate up to now, then the new rate counts.
    state.admit.frontiers.forget(id.get());
    frontier_of(&state, &voucher, &flash).await?;
    state.admit.set_rate(id, rate).await?;
    state.admit.frontiers.forget(id.get());
    if let Some(v) = state.sales.get(id).await? {
        state.sales.announce(&v).await;
    }
    Ok(web::Json(build_view(&state, id).await?))
}
