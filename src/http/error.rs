//! One error type for the HTTP boundary, rendered as the contract's body
//! `{"error": {"code": "...", "message": "..."}}`. Server-side failures are logged
//! with their cause and answered without it.
use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use serde_json::json;
use std::fmt;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub retry_after_secs: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after_secs: None,
        }
    }

    /// 400 `validation_failed`; the message starts with the field's name.
    pub fn validation(field: &str, problem: impl fmt::Display) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "validation_failed",
            format!("{field}: {problem}"),
        )
    }

    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 503 `unavailable` with `Retry-After`.
    pub fn unavailable(message: impl Into<String>, retry_after_secs: u64) -> Self {
        Self {
            retry_after_secs: Some(retry_after_secs),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
        }
    }

    /// A failure of ours or of a dependency: logged in full, answered without detail.
    pub fn internal(err: anyhow::Error) -> Self {
        if is_dependency_down(&err) {
            tracing::warn!(error = %format!("{err:#}"), "dependency unavailable");
            return Self::unavailable("a dependency is unavailable, try again shortly", 1);
        }
        tracing::error!(error = %format!("{err:#}"), "internal error");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error")
    }
}

/// Connection loss and timeouts are the dependency's state, not our bug: 503, not 500.
fn is_dependency_down(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        if let Some(e) = cause.downcast_ref::<redis::RedisError>() {
            return e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal();
        }
        if let Some(e) = cause.downcast_ref::<sqlx::Error>() {
            return match e {
                sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => true,
                // Connection failures (08), shutdowns and "cannot connect now" (57),
                // too many connections (53).
                sqlx::Error::Database(db) => db
                    .code()
                    .is_some_and(|c| c.starts_with("08") || c.starts_with("57") || c.starts_with("53")),
                _ => false,
            };
        }
        cause.downcast_ref::<tokio::time::error::Elapsed>().is_some()
    })
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.status.as_u16(), self.code, self.message)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut resp = HttpResponse::build(self.status);
        if let Some(secs) = self.retry_after_secs {
            resp.insert_header((header::RETRY_AFTER, secs.to_string()));
        }
        resp.json(json!({"error": {"code": self.code, "message": self.message}}))
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(err: anyhow::Error) -> Self {
        Self::internal(err)
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(err: sqlx::Error) -> Self {
        Self::internal(err.into())
    }
}

impl From<redis::RedisError> for ApiError {
    fn from(err: redis::RedisError) -> Self {
        Self::internal(err.into())
    }
}
