//! `GET /health/live` (the process answers) and `GET /health/ready` (Postgres, Redis
//! and RabbitMQ each answer within a short deadline; a 503 names the ones that do not).
use crate::app::AppState;
use actix_web::{web, HttpResponse};
use serde_json::json;
use std::time::Duration;

const CHECK_TIMEOUT: Duration = Duration::from_millis(1500);

pub async fn live() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

pub async fn ready(state: web::Data<AppState>) -> HttpResponse {
    let pg = async {
        sqlx::query("SELECT 1").execute(&state.pg).await?;
        anyhow::Ok(())
    };
    let redis = async {
        let mut conn = state.redis.conn().await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await?;
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
