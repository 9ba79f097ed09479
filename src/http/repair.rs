//! `GET /api/v1/admin/redis`: whether the service trusts its Redis, and a repair
//! under way: since when, and what its barrier waits for (orders published before
//! it and not stored yet, in RabbitMQ or held by a worker), with the workers' own
//! last word. Served from Postgres by any process, whichever one repairs.
//! `POST /api/v1/admin/redis/abandon`: an operator gives up on what a repair waits
//! for (see [`crate::epoch`]'s barrier).
use super::auth::Admin;
use super::error::ErrorBody;
use super::responses::{BadRequest, BodyRefused, Forbidden, RateLimited, Unauthorized, Unavailable};
use super::ApiError;
use super::AppState;
use crate::validate;
use actix_web::web;
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/admin/redis", web::get().to(redis_state))
        .route("/admin/redis/abandon", web::post().to(abandon));
}

/// `POST /api/v1/admin/redis/abandon` body.
#[derive(ToSchema)]
pub struct Abandon {
    /// The epoch of the repair under way (from `GET /api/v1/admin/redis`): an
    /// operator abandons what that repair waits for, never a later one's.
    #[schema(minimum = 1)]
    pub epoch: i64,
}

#[utoipa::path(post, path = "/api/v1/admin/redis/abandon", tag = "admin", security(("bearer" = [])),
    request_body = Abandon,
    responses((status = 200, description = "recorded: the repair goes on without the orders it waited for (logged as an incident)", body = RedisState),
        BadRequest, Unauthorized, Forbidden,
        (status = 409, body = ErrorBody, description = "no_such_repair: no repair of that epoch is under way"),
        BodyRefused, RateLimited, Unavailable))]
pub async fn abandon(
    state: web::Data<AppState>,
    admin: Admin,
    body: web::Json<serde_json::Value>,
) -> Result<web::Json<RedisState>, ApiError> {
    let obj = validate::object(&body)?;
    let epoch = validate::whole(validate::required(obj, "epoch")?, "epoch", 1, i64::MAX)?;
    let done =
        sqlx::query("UPDATE redis_epochs SET abandon_epoch = $2 WHERE namespace = $1 AND epoch = $2 AND repairing")
            .bind(state.keys.namespace())
            .bind(epoch)
            .execute(&state.pg)
            .await?
            .rows_affected();
    if done == 0 {
        return Err(ApiError::conflict(
            "no_such_repair",
            format!("no repair of epoch {epoch} is under way"),
        ));
    }
    tracing::error!(
        epoch,
        admin = admin.0.user_id,
        "an operator abandoned what the repair waits for"
    );
    redis_state(state, admin).await
}

/// The Redis epoch as Postgres records it, and what a repair waits for.
#[derive(Serialize, ToSchema)]
pub struct RedisState {
    /// The epoch Postgres vouches for (0 before the first).
    pub epoch: i64,
    /// True from the moment a repair takes its epoch until its sales sell again.
    pub repairing: bool,
    /// When the repair under way took its epoch (its sales are closed since).
    pub repair_started_at: Option<DateTime<Utc>>,
    /// Orders published before the repair and not stored yet: the repair waits for
    /// each of them (a worker holding them, RabbitMQ redelivering them).
    pub repair_waiting_orders: i32,
    /// Why the repair waits, in words; null when it does not.
    pub repair_reason: Option<String>,
    /// The sales the repair under way has closed and rebuilds (on a Redis Cluster,
    /// those with a shard on a master that changed); null when every sale is, or
    /// when no repair is under way. The others keep selling.
    pub repair_sales: Option<Vec<i64>>,
    /// What this process thinks of the server it talks to: `verified`,
    /// `repairing` or `unverified`.
    pub this_process: String,
    /// The workers' last heartbeats, newest first (informative: nothing is decided
    /// from them).
    pub workers: Vec<WorkerSeen>,
}

#[derive(Default, sqlx::FromRow)]
struct EpochRow {
    epoch: i64,
    repairing: bool,
    repair_started_at: Option<DateTime<Utc>>,
    repair_waiting: i32,
    repair_reason: Option<String>,
    repair_scope: Option<Vec<i64>>,
}

#[derive(Serialize, ToSchema, sqlx::FromRow)]
pub struct WorkerSeen {
    pub process: String,
    /// Deliveries it held, unsettled, at its last heartbeat.
    pub holding: i32,
    pub seen_at: DateTime<Utc>,
}

#[utoipa::path(get, path = "/api/v1/admin/redis", tag = "admin", security(("bearer" = [])),
    responses((status = 200, description = "the Redis epoch and any repair under way", body = RedisState),
        Unauthorized, Forbidden, RateLimited, Unavailable))]
pub async fn redis_state(state: web::Data<AppState>, _admin: Admin) -> Result<web::Json<RedisState>, ApiError> {
    let ns = state.keys.namespace();
    let row: Option<EpochRow> = sqlx::query_as(
        "SELECT epoch, repairing, repair_started_at, repair_waiting, repair_reason,
                CASE WHEN repair_scope_epoch = epoch THEN repair_scope END AS repair_scope
           FROM redis_epochs WHERE namespace = $1",
    )
    .bind(ns)
    .fetch_optional(&state.pg)
    .await?;
    let workers: Vec<WorkerSeen> = sqlx::query_as(
        "SELECT process, holding, seen_at FROM worker_heartbeats WHERE namespace = $1 ORDER BY seen_at DESC LIMIT 20",
    )
    .bind(ns)
    .fetch_all(&state.pg)
    .await?;
    let EpochRow {
        epoch,
        repairing,
        repair_started_at,
        repair_waiting,
        repair_reason,
        repair_scope,
    } = row.unwrap_or_default();
    let this_process = match state.redis.identity().get() {
        Some(v) if !v.repairing => "verified",
        Some(_) => "repairing",
        None => "unverified",
    }
    .to_owned();
    Ok(web::Json(RedisState {
        epoch,
        repairing,
        repair_started_at,
        repair_waiting_orders: repair_waiting,
        repair_reason,
        repair_sales: repair_scope.filter(|_| repairing),
        this_process,
        workers,
    }))
}
