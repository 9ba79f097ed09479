//! `GET /health/live` (the process answers) and `GET /health/ready` (Postgres, Redis
//! and RabbitMQ each answer within a short deadline; a 503 names the ones that do not).
//! Readiness also tells whether the Redis server is verified (see [`crate::epoch`])
//! and how durable Redis is: whether an acknowledged order survives a Redis crash.
use crate::app::AppState;
use actix_web::{web, HttpResponse};
use serde_json::json;
use std::time::Duration;

const CHECK_TIMEOUT: Duration = Duration::from_millis(1500);

#[utoipa::path(get, path = "/health/live", tag = "health", responses((status = 200, description = "the process answers")))]
pub async fn live() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

#[utoipa::path(get, path = "/health/ready", tag = "health", responses((status = 200, description = "Postgres, Redis and RabbitMQ answer"), (status = 503, description = "names the dependency that does not", body = crate::http::error::ErrorBody)))]
pub async fn ready(state: web::Data<AppState>) -> HttpResponse {
    let pg = async {
        sqlx::query("SELECT 1").execute(&state.pg).await?;
        anyhow::Ok(())
    };
    let redis = async {
        let mut conn = state.redis.conn().await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await?;
        // A cluster must serve every slot, and every master must answer.
        if state.redis.is_cluster() {
            state.redis.current_identity().await?;
        }
        anyhow::Ok(())
    };
    let amqp = state.broker.check();
    let (pg, redis, amqp) = tokio::join!(
        tokio::time::timeout(CHECK_TIMEOUT, pg),
        tokio::time::timeout(CHECK_TIMEOUT, redis),
        tokio::time::timeout(CHECK_TIMEOUT, amqp),
    );
    let mut down = Vec::new();
    let mut checks = serde_json::Map::new();
    for (name, result) in [("postgres", pg), ("redis", redis), ("rabbitmq", amqp)] {
        let ok = matches!(result, Ok(Ok(())));
        if !ok {
            down.push(name);
        }
        checks.insert(name.into(), json!(if ok { "up" } else { "down" }));
    }
    // Whether the service trusts the Redis server it talks to (orders get 503 while
    // a repair is due or under way), and what an acknowledged order risks.
    let redis_state = match state.redis.identity().get() {
        Some(v) if !v.repairing => json!({"state": "verified", "epoch": v.epoch}),
        Some(v) => json!({"state": "repairing", "epoch": v.epoch}),
        None => json!({"state": "unverified"}),
    };
    let durability = state
        .epoch_guard
        .durability
        .read()
        .expect("durability poisoned")
        .clone();
    checks.insert("redis_epoch".into(), redis_state);
    checks.insert("redis_durability".into(), json!(durability));
    if down.is_empty() {
        HttpResponse::Ok().json(json!({"status": "ready", "checks": checks}))
    } else {
        HttpResponse::ServiceUnavailable()
            .insert_header(("Retry-After", "1"))
            .json(json!({
                "error": {"code": "unavailable", "message": format!("not ready: {} down", down.join(", "))},
                "checks": checks,
            }))
    }
}

/// `GET /metrics`: Prometheus text format. The outbox backlog is read here.
#[utoipa::path(get, path = "/metrics", tag = "health", responses((status = 200, description = "Prometheus text format", content_type = "text/plain")))]
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    let streams: Vec<String> = state
        .cache
        .flash_sales()
        .iter()
        .flat_map(|e| {
            let shards = e.voucher.flash.as_ref().map_or(1, |f| f.shards());
            (0..shards)
                .map(|k| state.keys.outbox_at(e.voucher.id, k, shards))
                .collect::<Vec<_>>()
        })
        .collect();
    if !streams.is_empty() {
        let mut pipe = redis::pipe();
        for s in &streams {
            pipe.cmd("XLEN").arg(s);
        }
        let backlog = async {
            let mut conn = state.redis.conn().await?;
            let lens: Vec<i64> = pipe.query_async(&mut conn).await?;
            anyhow::Ok(lens.iter().sum::<i64>())
        };
        if let Ok(Ok(n)) = tokio::time::timeout(CHECK_TIMEOUT, backlog).await {
            state.metrics.outbox_backlog.set(n);
        }
    }
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(state.metrics.render())
}
