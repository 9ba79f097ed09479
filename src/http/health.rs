//! `GET /health/live` (the process answers) and `GET /health/ready` (Postgres, Redis
//! and RabbitMQ each answered the last checks, which a background task runs once a
//! second, [`crate::app::readiness`]; a 503 names the ones that did not).
//! Readiness also tells which sales this process has closed while they are
//! repaired (see [`crate::recovery`]) and how durable Redis is: whether an acknowledged order survives a Redis crash,
//! and how many replicas the weakest master has now. It refuses a Redis that may
//! evict keys (`maxmemory-policy` other than `noeviction`, see
//! [`crate::redis_conn::MasterFacts`]): it would drop shoppers' marks and stock
//! silently.
use super::state::AppState;
use actix_web::{web, HttpResponse};
use serde_json::json;
#[utoipa::path(get, path = "/health/live", tag = "health", responses((status = 200, description = "the process answers")))]
pub async fn live() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

#[utoipa::path(get, path = "/health/ready", tag = "health", responses((status = 200, description = "Postgres, Redis and RabbitMQ answered the last checks (run once a second)"), (status = 503, description = "names the dependency that does not", body = crate::http::error::ErrorBody)))]
pub async fn ready(state: web::Data<AppState>) -> HttpResponse {
    let Some(report) = state.http.readiness.get() else {
        return not_ready("not ready: dependencies not checked yet".into(), serde_json::Map::new());
    };
    let mut checks = serde_json::Map::new();
    for (name, up) in &report.checks {
        checks.insert((*name).into(), json!(if *up { "up" } else { "down" }));
    }
    // The sales this process has closed (a shard lost or behind: orders get 503
    // until it is repaired), and what an acknowledged order risks.
    let closed: Vec<String> = state.recovery.closed.list().iter().map(|v| v.to_string()).collect();
    let redis_state = json!({"closed_sales": closed});
    let mut durability = state.recovery.durability.read().expect("durability poisoned").clone();
    // Replicas and eviction as every master reported them at the last check.
    let mut down: Vec<String> = report.down().into_iter().map(str::to_owned).collect();
    if let (Some(d), Some(m)) = (durability.as_mut(), report.masters.as_ref()) {
        d.replicas = m.replicas;
    }
    if let Some(m) = report.masters.as_ref().filter(|m| !m.eviction_policy_ok()) {
        down.push(format!(
            "redis (maxmemory-policy {}: evicts keys; set noeviction)",
            m.evicting.join(", ")
        ));
    }
    checks.insert("redis_repairs".into(), redis_state);
    checks.insert("redis_durability".into(), json!(durability));
    checks.insert("redis_masters".into(), json!(report.masters));
    checks.insert("checked_at".into(), json!(report.checked_at.to_rfc3339()));
    if down.is_empty() {
        HttpResponse::Ok().json(json!({"status": "ready", "checks": checks}))
    } else {
        not_ready(format!("not ready: {} down", down.join(", ")), checks)
    }
}

fn not_ready(message: String, checks: serde_json::Map<String, serde_json::Value>) -> HttpResponse {
    HttpResponse::ServiceUnavailable()
        .insert_header(("Retry-After", "1"))
        .json(json!({"error": {"code": "unavailable", "message": message}, "checks": checks}))
}

/// `GET /metrics`: Prometheus text format. The outbox backlog gauge is kept by the
/// readiness task ([`crate::app::readiness`]), not read here.
#[utoipa::path(get, path = "/metrics", tag = "health", responses((status = 200, description = "Prometheus text format", content_type = "text/plain")))]
/// The page as rendered at most a second ago (`Metrics::page`), gzipped when the
/// scraper takes gzip (Prometheus does).
pub async fn metrics(req: actix_web::HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let page = state.metrics.page();
    let gzip = req
        .headers()
        .get_all(actix_web::http::header::ACCEPT_ENCODING)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';').map(str::trim);
            // `gzip;q=0` (or 0.0, 0.000) refuses it.
            let refused = |p: &str| {
                let p = p.replace(' ', "");
                p.get(..2).is_some_and(|k| k.eq_ignore_ascii_case("q="))
                    && p[2..].parse::<f64>().is_ok_and(|q| q <= 0.0)
            };
            parts.next().is_some_and(|c| c.eq_ignore_ascii_case("gzip")) && !parts.any(refused)
        });
    let mut answer = HttpResponse::Ok();
    answer
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .insert_header((actix_web::http::header::VARY, "Accept-Encoding"));
    if gzip {
        answer
            .insert_header((actix_web::http::header::CONTENT_ENCODING, "gzip"))
            .body(page.gzip)
    } else {
        answer.body(page.text)
    }
}
