//! The order as clients see it, and as it travels through RabbitMQ.
use crate::id::{OrderId, OrderKey, UserId, VoucherId};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::FromRow;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::ToSchema;

/// One accepted order in flight from the outbox to Postgres.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct OrderMsg {
    pub id: OrderId,
    pub user_id: UserId,
    pub voucher_id: VoucherId,
    /// Milliseconds since the Unix epoch when Redis admitted it.
    pub created_ms: i64,
    /// The generation of its shard when Redis admitted it ([`crate::recovery`]);
    /// informative: a repair counts every order in flight, so the worker stores an
    /// order of an older generation like any other. 0 in messages of older
    /// versions.
    #[serde(default)]
    pub epoch: i64,
}

impl OrderMsg {
    /// What tells this order from another that shares its id.
    pub fn key(&self) -> OrderKey {
        OrderKey {
            id: self.id,
            user: self.user_id,
            voucher: self.voucher_id,
        }
    }
}

/// The body of one RabbitMQ message: a batch of orders.
#[derive(Debug, Serialize, Deserialize)]
pub struct OrderBatch {
    pub orders: Vec<OrderMsg>,
    /// The relay's intent this batch was recorded under
    /// ([`crate::ordering::outbox::relay::intent`]): the worker deletes it once the batch is
    /// stored. Absent in messages of older versions and in hand-made ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent: Option<i64>,
}

/// An order, as the API shows it.
#[derive(Clone, Debug, Serialize, FromRow, PartialEq, Eq, ToSchema)]
pub struct Order {
    #[serde(rename = "order_id", with = "crate::id")]
    #[sqlx(rename = "id")]
    #[schema(schema_with = crate::id::schema)]
    pub id: OrderId,
    /// The business number (rule `order`); null until the order is persisted.
    #[schema(required = true, example = "SK202611220001")]
    pub order_no: Option<String>,
    #[serde(with = "crate::id")]
    #[schema(schema_with = crate::id::schema)]
    pub voucher_id: VoucherId,
    #[serde(with = "crate::id")]
    #[schema(schema_with = crate::id::schema)]
    pub user_id: UserId,
    #[schema(schema_with = status_schema)]
    pub status: String,
    pub created_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paid_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancelled_at: Option<DateTime<Utc>>,
}

/// An order's status: one of [`STATUSES`].
fn status_schema() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(STATUSES))
        .description(Some(
            "pending: accepted, not yet in Postgres; created: awaiting payment; paid; \
             cancelled (by its owner or at the end of the payment window; its unit is back on sale); \
             failed: refused by the database's final check",
        ))
        .into()
}

/// Every status an order can have.
const STATUSES: [&str; 5] = ["pending", "created", "paid", "cancelled", "failed"];

/// `202` to `POST /api/v1/vouchers/{id}/orders`: Redis admitted the order; the
/// worker persists it (`status` then becomes `created`).
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq, ToSchema)]
pub struct Accepted {
    #[serde(with = "crate::id")]
    #[schema(schema_with = crate::id::schema)]
    pub order_id: OrderId,
    #[schema(schema_with = pending_schema)]
    pub status: &'static str,
}

impl Accepted {
    pub fn new(order_id: OrderId) -> Self {
        Self {
            order_id,
            status: "pending",
        }
    }
}

fn pending_schema() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["pending"]))
        .into()
}

impl Order {
    /// An order Redis accepted that the worker has not written yet, from the
    /// numbers of its shopper's mark.
    pub fn pending(id: i64, voucher_id: i64, user_id: i64, created_ms: i64) -> Self {
        Self {
            id: OrderId::new(id),
            order_no: None,
            voucher_id: VoucherId::new(voucher_id),
            user_id: UserId::new(user_id),
            status: "pending".into(),
            created_at: DateTime::from_timestamp_millis(created_ms).unwrap_or_default(),
            paid_at: None,
            cancelled_at: None,
        }
    }
}

/// An order's columns as the API shows them: `id` is the id its shopper was given
/// (for an order stored under a fresh id because another order already had its
/// own, `issued_id`).
pub const ORDER_COLUMNS: &str =
    "coalesce(issued_id, id) AS id, order_no, voucher_id, user_id, status, created_at, paid_at, cancelled_at";
