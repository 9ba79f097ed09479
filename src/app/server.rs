//! The HTTP server: routes, the contract's error bodies for what actix refuses
//! before a handler runs, and the signals that stop the process.
use crate::http::auth::JwtKeys;
use crate::http::state::AppState;
use crate::http::{error::ApiError, health};
use actix_web::error::{JsonPayloadError, PathError, QueryPayloadError};
use actix_web::http::StatusCode;
use actix_web::{web, App, HttpRequest, HttpServer};
use anyhow::Result;
use std::net::TcpListener;
use std::sync::Arc;
use tracing_actix_web::TracingLogger;

/// Until SIGTERM or SIGINT.
pub async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

pub fn http_server(state: Arc<AppState>, listener: TcpListener) -> Result<actix_web::dev::Server> {
    let jwt: web::Data<JwtKeys> = web::Data::from(state.http.jwt.clone());
    let limit = state.settings.http.body_limit;
    let admission = web::Data::from(state.http.rate_limits.clone());
    let metrics = web::Data::from(state.metrics.clone());
    let workers = state.settings.http.http_workers;
    let state = web::Data::from(state);
    let server = HttpServer::new(move || {
        App::new()
            .wrap(actix_web::middleware::from_fn(crate::http::rate_limits::admit))
            .wrap(TracingLogger::<crate::http::request_span::RequestSpan>::new())
            // Outermost: every answer, refusals of admission and routing included,
            // carries `X-Request-Id`, and the span above logs the same id.
            .wrap(actix_web::middleware::from_fn(crate::http::request_id::tag))
            .app_data(state.clone())
            .app_data(admission.clone())
            .app_data(metrics.clone())
            .app_data(jwt.clone())
            .app_data(web::JsonConfig::default().limit(limit).error_handler(json_error))
            .app_data(web::PayloadConfig::new(limit))
            .app_data(web::PathConfig::default().error_handler(path_error))
            .app_data(web::QueryConfig::default().error_handler(query_error))
            .route("/health/live", web::get().to(health::live))
            .route("/health/ready", web::get().to(health::ready))
            .route("/metrics", web::get().to(health::metrics))
            .configure(crate::http::openapi::configure)
            .configure(crate::http::console::configure)
            .service(
                // The order routes first: actix-router tries patterns in the order
                // they were registered, and the order endpoint is the hot one.
                web::scope("/api/v1")
                    .configure(crate::http::orders::configure)
                    .configure(crate::http::vouchers::configure)
                    .configure(crate::http::stock::configure)
                    .configure(crate::http::sales::configure)
                    .configure(crate::http::repair::configure)
                    .configure(crate::http::sequences::configure)
                    .configure(crate::http::challenge::configure)
                    .configure(crate::http::waiting::configure)
                    .configure(crate::http::raffle::configure)
                    .configure(crate::http::admit_admin::configure),
            )
            .default_service(web::to(not_found))
    });
    let server = if workers > 0 { server.workers(workers) } else { server };
    let server = server
        .listen(listener)?
        // Signals are ours: shutdown also stops the relay and worker in order.
        .disable_signals()
        .shutdown_timeout(10)
        .run();
    Ok(server)
}

fn json_error(err: JsonPayloadError, _: &HttpRequest) -> actix_web::Error {
    let e = match &err {
        JsonPayloadError::Overflow { .. } | JsonPayloadError::OverflowKnownLength { .. } => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "the request body is too large",
        ),
        JsonPayloadError::ContentType => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as application/json",
        ),
        other => ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            format!("the body is not valid JSON: {other}"),
        ),
    };
    e.into()
}

fn path_error(err: PathError, _: &HttpRequest) -> actix_web::Error {
    ApiError::validation("path", err).into()
}

fn query_error(err: QueryPayloadError, _: &HttpRequest) -> actix_web::Error {
    ApiError::validation("query", err).into()
}

/// No route took the request: 405 with `Allow` for a known path, else 404.
async fn not_found(req: HttpRequest) -> actix_web::HttpResponse {
    use actix_web::HttpMessage;
    req.extensions_mut().insert(crate::http::rate_limits::Unmatched);
    crate::http::methods::unrouted(req.method(), req.path())
}
