//! `GET /api/v1/admin/redis`: per sale, whether it is closed by a repair now, how
//! long repairs have kept it closed in all and how many there were (Postgres's
//! `sale_states`, written by whichever process repaired); what this process has
//! closed; the workers' own last word. Served by any process.
use super::auth::Admin;
use super::error::ApiError;
use super::responses::{Forbidden, RateLimited, Unauthorized, Unavailable};
use super::state::AppState;
use actix_web::web;
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/admin/redis", web::get().to(redis_state));
}

/// What Redis went through, sale by sale.
#[derive(Serialize, ToSchema)]
pub struct RedisState {
    /// The running sales (begun or not, not ended), and any other sale closed now,
    /// by id.
    pub sales: Vec<SaleAvailability>,
    /// The sales this process has closed now (a shard of theirs found lost or
    /// behind, a repair under way): its orders of them answer 503.
    pub this_process_closed: Vec<String>,
    /// The workers' last heartbeats, newest first (informative: nothing is decided
    /// from them).
    pub workers: Vec<WorkerSeen>,
}

/// One sale's availability as repairs affected it.
#[derive(Serialize, ToSchema)]
pub struct SaleAvailability {
    #[serde(with = "crate::id")]
    #[schema(schema_with = crate::id::schema)]
    pub voucher_id: i64,
    /// Closed now: a process found a shard of it lost or gone back in time, and the
    /// repair has not reopened it yet.
    pub closed: bool,
    /// Since when, if closed now.
    pub closed_since: Option<DateTime<Utc>>,
    /// How long repairs have kept it closed in all, in milliseconds (the closure
    /// under way included).
    pub closed_ms: i64,
    /// Repairs of it so far.
    pub repairs: i32,
    /// Its generation: the repairs' count of new states (every shard's sequence
    /// starts at `generation × 2^32` after one).
    pub generation: i64,
    /// Why it was last closed, in words.
    pub last_reason: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct WorkerSeen {
    pub process: String,
    /// Deliveries it held, unsettled, at its last heartbeat.
    pub holding: i32,
    pub seen_at: DateTime<Utc>,
}

#[utoipa::path(get, path = "/api/v1/admin/redis", tag = "admin", security(("bearer" = [])),
    responses((status = 200, description = "per sale, repairs and how long they kept it closed", body = RedisState),
        Unauthorized, Forbidden, RateLimited, Unavailable))]
pub async fn redis_state(state: web::Data<AppState>, _admin: Admin) -> Result<web::Json<RedisState>, ApiError> {
    let now = state.clock.now();
    let mut ids: Vec<i64> = state
        .sales
        .flash_sales()
        .iter()
        .filter(|e| e.voucher.flash.as_ref().is_some_and(|f| f.end_at > now))
        .map(|e| e.voucher.id)
        .collect();
    let closed = state.recovery.closed_sales().await.map_err(ApiError::internal)?;
    ids.extend(closed);
    ids.sort_unstable();
    ids.dedup();
    let states = state.recovery.states(&ids).await.map_err(ApiError::internal)?;
    let sales = ids
        .iter()
        .map(|v| {
            let s = states.get(v).cloned().unwrap_or_default();
            SaleAvailability {
                voucher_id: *v,
                closed: s.closed_since.is_some(),
                closed_since: s.closed_since,
                closed_ms: s.closed_ms + s.closed_now_ms,
                repairs: s.repairs,
                generation: s.gen,
                last_reason: s.last_reason,
            }
        })
        .collect();
    let workers = state
        .recovery
        .workers_seen(20)
        .await
        .map_err(ApiError::internal)?
        .into_iter()
        .map(|h| WorkerSeen {
            process: h.process,
            holding: h.holding,
            seen_at: h.seen_at,
        })
        .collect();
    Ok(web::Json(RedisState {
        sales,
        this_process_closed: state.recovery.closed.list().iter().map(|v| v.to_string()).collect(),
        workers,
    }))
}
