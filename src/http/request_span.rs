//! The root span of every request (it carries the request id that every log line of
//! the request shows: the one [`super::request_id`] put on the request and on its
//! answer's `X-Request-Id`).
//!
//! tracing-actix-web's default builder also logs every 4xx response as a warning.
//! In a flash sale most answers are 409 `sold_out` by design: that would be one log
//! line per request at peak, costing more than the request itself. Client errors
//! are only recorded on the span; server errors are logged where they happen
//! ([`super::error::ApiError::internal`]).
//!
//! The span is lean (request id, method, path, the caller's user id once their token
//! is verified, status): the default one formats a
//! dozen fields per request, which showed as a quarter of the cost of a
//! `/health/live` request, and its route field re-runs every route pattern's regex
//! (`match_pattern`), which showed as a tenth of the cost of an order request.
use super::request_id::RequestId;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::HttpMessage;
use tracing::{field::Empty, Span};
use tracing_actix_web::RootSpanBuilder;

pub struct RequestSpan;

impl RootSpanBuilder for RequestSpan {
    fn on_request_start(request: &ServiceRequest) -> Span {
        let extensions = request.extensions();
        let id = extensions.get::<RequestId>().and_then(|RequestId(v)| v.to_str().ok());
        tracing::info_span!(
            "request",
            request_id = id.unwrap_or_default(),
            method = %request.method(),
            path = request.path(),
            user_id = Empty,
            status = Empty,
        )
    }

    fn on_request_end<B: MessageBody>(span: Span, outcome: &Result<ServiceResponse<B>, actix_web::Error>) {
        let status = match outcome {
            Ok(resp) => resp.response().status(),
            Err(e) => e.as_response_error().status_code(),
        };
        span.record("status", status.as_u16());
    }
}
