//! Why an order was not placed: the [`Refusal`] a shopper is answered with, and
//! which Redis failures pass (503, retry) rather than fail (500).
use crate::id::OrderId;
use chrono::{DateTime, Utc};

/// Why an order was not placed. Every refusal but `Failed` is an answer to the
/// shopper; `Unavailable` ones are worth retrying (the order may not exist yet).
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("no voucher with this id")]
    VoucherNotFound,
    #[error("this voucher is not sold in a flash sale")]
    NotAFlashSale,
    #[error("the sale starts at {}", .0.to_rfc3339())]
    NotStarted(DateTime<Utc>),
    #[error("the sale ended at {}", .0.to_rfc3339())]
    Ended(DateTime<Utc>),
    #[error("this sale is paused; try again later")]
    Paused,
    #[error("this sale is sold out")]
    SoldOut,
    /// With the existing order's id when the script named it.
    #[error("you already have an order for this voucher")]
    AlreadyOrdered(Option<OrderId>),
    /// A queue or raffle sale's order without a valid admission token.
    #[error("{}", .0.message())]
    NotAdmitted(NotAdmitted),
    /// Try again after `retry_after_secs`.
    #[error("{message}")]
    Unavailable {
        message: &'static str,
        retry_after_secs: u64,
    },
    #[error(transparent)]
    Failed(anyhow::Error),
}

/// A Redis that is failing over, a replica, loading its data, out of memory, busy
/// or unreachable is a state that passes: `Unavailable` (503, retry), never
/// `Failed` (500). Where the answer says the connection may not reach a usable
/// master (a replica, a failover), it is already dropped; an out-of-memory or busy
/// server keeps it (see [`crate::redis_conn`]).
impl From<anyhow::Error> for Refusal {
    fn from(e: anyhow::Error) -> Self {
        let redis_down = e
            .chain()
            .filter_map(|c| c.downcast_ref::<redis::RedisError>())
            .any(crate::redis_conn::is_transient);
        if !redis_down {
            return Refusal::Failed(e);
        }
        tracing::warn!(error = %format!("{e:#}"), "Redis cannot take orders right now");
        unavailable("Redis is failing over or not writable right now; try again", 1)
    }
}

impl Refusal {
    /// The label of `seckill_order_requests_total`.
    pub fn outcome(&self) -> &'static str {
        match self {
            Refusal::VoucherNotFound => "not_found",
            Refusal::NotAFlashSale => "not_a_flash_sale",
            Refusal::NotStarted(_) => "not_started",
            Refusal::Ended(_) => "ended",
            Refusal::Paused => "paused",
            Refusal::SoldOut => "sold_out",
            Refusal::AlreadyOrdered(_) => "already_ordered",
            Refusal::NotAdmitted(_) => "not_admitted",
            Refusal::Unavailable { .. } => "unavailable",
            Refusal::Failed(_) => "error",
        }
    }
}

/// Why an order of a queue or raffle sale was refused its admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotAdmitted {
    /// No admission token.
    Required,
    /// The token's turn is over.
    Expired,
    /// Forged, malformed, another shopper's or another sale's: the reason.
    Invalid(&'static str),
}

impl NotAdmitted {
    /// The contract's error code.
    pub fn code(&self) -> &'static str {
        match self {
            NotAdmitted::Required => "admission_required",
            NotAdmitted::Expired => "admission_expired",
            NotAdmitted::Invalid(_) => "admission_invalid",
        }
    }

    /// What the shopper is told.
    pub fn message(&self) -> &'static str {
        match self {
            NotAdmitted::Required => {
                "this sale takes orders only with an admission token (X-Admission-Token) from its queue or raffle"
            }
            NotAdmitted::Expired => "the admission token has expired: poll the queue or the raffle for a new one",
            NotAdmitted::Invalid(why) => why,
        }
    }
}

/// Why an order request was not taken: refused, or over the edge's rate limit
/// (`L`, the limiter's own answer).
#[derive(Debug)]
pub enum NotTaken<L> {
    Refused(Refusal),
    Limited(L),
}

impl<L> NotTaken<L> {
    /// The label of `seckill_order_requests_total`.
    pub fn outcome(&self) -> &'static str {
        match self {
            NotTaken::Refused(r) => r.outcome(),
            NotTaken::Limited(_) => "rate_limited",
        }
    }
}

pub(super) fn unavailable(message: &'static str, retry_after_secs: u64) -> Refusal {
    Refusal::Unavailable {
        message,
        retry_after_secs,
    }
}
