//! One error type for the HTTP boundary, rendered as the contract's body
//! `{"error": {"code": "...", "message": "..."}}`. Server-side failures are logged
//! with their cause and answered without it.
//!
//! Domain errors become `ApiError`s here, and only here (the `From` impls at the
//! end): the status and `code` each one gets is part of the public contract.
use crate::id::OrderId;
use crate::locks::user::Busy;
use crate::numbers::RuleError;
use crate::validate::ValidationError;
use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use std::fmt;
use utoipa::ToSchema;

/// The body of every error: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Serialize, ToSchema)]
pub struct ErrorBody<'a> {
    pub error: ErrorDetail<'a>,
}

#[derive(Serialize, ToSchema)]
pub struct ErrorDetail<'a> {
    /// For programs. One of: `validation_failed`, `invalid_json`,
    /// `payload_too_large`, `unsupported_media_type` (the request); `unauthorized`,
    /// `forbidden` (the token); `not_found`, `voucher_not_found`, `order_not_found`,
    /// `sequence_not_found`; `not_a_flash_sale`, `sale_not_started`, `sale_ended`,
    /// `sale_paused`, `sold_out`, `already_ordered` (placing an order);
    /// `order_not_payable`, `order_not_cancellable`, `request_in_progress` (pay and
    /// cancel); `rate_limited`, `unavailable`, `internal`.
    #[schema(pattern = "^[a-z][a-z_]*$", example = "sold_out")]
    pub code: &'a str,
    /// For people. For `validation_failed` it starts with the field's name:
    /// `"stock: must be >= 0"`.
    pub message: &'a str,
    /// With `already_ordered`: the shopper's existing order for the voucher (its
    /// status is at `/api/v1/orders/{order_id}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[1-9][0-9]{0,18}$", example = "391859222515548161")]
    pub order_id: Option<String>,
}

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub retry_after_secs: Option<u64>,
    /// The existing order an `already_ordered` names.
    pub order_id: Option<i64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after_secs: None,
            order_id: None,
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

/// Connection loss and timeouts are the dependency's state, not our bug: 503, not
/// 500; so is a Redis that fails over, is a replica or loads its data (`MOVED`,
/// `CLUSTERDOWN`, `READONLY`, `LOADING`, …), or cannot take a write for now (`OOM`,
/// `NOREPLICAS`, `BUSY`, `MISCONF`); see [`crate::redis_conn::is_transient`].
fn is_dependency_down(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        if cause.is::<crate::sales::shards::NoConsistentReading>() || cause.is::<crate::recovery::Repairing>() {
            return true;
        }
        if let Some(e) = cause.downcast_ref::<redis::RedisError>() {
            return crate::redis_conn::is_transient(e);
        }
        if let Some(e) = cause.downcast_ref::<sqlx::Error>() {
            return match e {
                sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => true,
                // Connection failures (08), shutdowns and "cannot connect now" (57),
                // too many connections (53), and a write on a connection to a server
                // that became a standby (25006, read-only transaction): the pools
                // move to the promoted primary (app/pg_follow.rs).
                sqlx::Error::Database(db) => db
                    .code()
                    .is_some_and(|c| c.starts_with("08") || c.starts_with("57") || c.starts_with("53") || c == "25006"),
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
        resp.json(ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: &self.message,
                order_id: self.order_id.map(|id| id.to_string()),
            },
        })
    }
}

impl From<crate::ordering::place::Refusal> for ApiError {
    fn from(r: crate::ordering::place::Refusal) -> Self {
        use crate::ordering::place::Refusal;
        let message = r.to_string();
        match r {
            Refusal::VoucherNotFound => ApiError::not_found("voucher_not_found", message),
            Refusal::NotAFlashSale => ApiError::conflict("not_a_flash_sale", message),
            Refusal::NotStarted(_) => ApiError::conflict("sale_not_started", message),
            Refusal::Ended(_) => ApiError::conflict("sale_ended", message),
            Refusal::Paused => ApiError::conflict("sale_paused", message),
            Refusal::SoldOut => ApiError::conflict("sold_out", message),
            Refusal::AlreadyOrdered(order_id) => ApiError {
                order_id: order_id.map(OrderId::get),
                ..ApiError::conflict("already_ordered", message)
            },
            Refusal::NotAdmitted(why) => ApiError::new(actix_web::http::StatusCode::FORBIDDEN, why.code(), message),
            Refusal::Unavailable { retry_after_secs, .. } => ApiError::unavailable(message, retry_after_secs),
            Refusal::Failed(e) => e.into(),
        }
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

/// 400 `validation_failed`; the message starts with the field's name.
impl From<ValidationError> for ApiError {
    fn from(err: ValidationError) -> Self {
        Self::validation(&err.field, err.message)
    }
}

/// 400 `validation_failed`; the message starts with the field's name.
impl From<RuleError> for ApiError {
    fn from(err: RuleError) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "validation_failed", err.to_string())
    }
}

/// 409 `request_in_progress`: the shopper's previous pay or cancel still runs.
impl From<Busy> for ApiError {
    fn from(_: Busy) -> Self {
        Self::conflict(
            "request_in_progress",
            "another request of yours is in progress; retry shortly",
        )
    }
}
