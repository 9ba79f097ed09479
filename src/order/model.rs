//! The order as clients see it, and as it travels through RabbitMQ.
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::FromRow;

/// One accepted order in flight from the outbox to Postgres.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct OrderMsg {
    pub id: i64,
    pub user_id: i64,
    pub voucher_id: i64,
    /// Milliseconds since the Unix epoch when Redis admitted it.
    pub created_ms: i64,
}

/// The body of one RabbitMQ message: a batch of orders.
#[derive(Debug, Serialize, Deserialize)]
pub struct OrderBatch {
    pub orders: Vec<OrderMsg>,
}

/// The order view of the API.
#[derive(Clone, Debug, Serialize, FromRow, PartialEq, Eq)]
pub struct Order {
    #[serde(rename = "order_id", with = "crate::http::id")]
    #[sqlx(rename = "id")]
    pub id: i64,
    pub order_no: Option<String>,
    #[serde(with = "crate::http::id")]
    pub voucher_id: i64,
    #[serde(with = "crate::http::id")]
    pub user_id: i64,
    pub status: String,
    pub created_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paid_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancelled_at: Option<DateTime<Utc>>,
}

impl Order {
    /// An order Redis accepted that the worker has not written yet.
    pub fn pending(id: i64, voucher_id: i64, user_id: i64, created_ms: i64) -> Self {
        Self {
            id,
            order_no: None,
            voucher_id,
            user_id,
            status: "pending".into(),
            created_at: DateTime::from_timestamp_millis(created_ms).unwrap_or_default(),
            paid_at: None,
            cancelled_at: None,
        }
    }
}

pub const ORDER_COLUMNS: &str = "id, order_no, voucher_id, user_id, status, created_at, paid_at, cancelled_at";
