//! What the admin console's live numbers answer: a sale read through every area.
use super::Audit;
use crate::ordering::outbox::RelayState;
use crate::sales::view::SaleStats;
use crate::sales::Voucher;
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

/// `GET /api/v1/admin/vouchers/{id}/live`: what the admin console shows of a
/// sale, read together. The parts are read one after the other, not at one
/// instant (`audit` explains what that can do to `balanced`).
#[derive(Clone, Debug, Serialize, PartialEq, Eq, ToSchema)]
pub struct LiveSale {
    #[serde(flatten)]
    pub voucher: Voucher,
    /// As in the admin view (`GET /api/v1/admin/vouchers/{id}`).
    pub stats: SaleStats,
    pub orders: OrderCounts,
    pub relay: RelayState,
    /// The sale's books, as `GET /api/v1/admin/vouchers/{id}/audit` reads them but
    /// without asking RabbitMQ (`in_flight.queue_ready` is null).
    pub audit: Audit,
    /// When this instance finished reading (its clock): orders per second are
    /// deltas of `orders.accepted` over deltas of this.
    pub read_at: DateTime<Utc>,
}

/// A sale's orders by what became of them.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq, ToSchema)]
pub struct OrderCounts {
    /// Admitted by Redis (`stats.orders_accepted`).
    pub accepted: i64,
    /// In Postgres, but for `failed` ones (`stats.orders_persisted`).
    pub persisted: i64,
    /// Refused by the database's final check (incidents).
    pub failed: i64,
    /// Persisted and awaiting payment.
    pub awaiting_payment: i64,
    pub paid: i64,
    /// Every cancelled order: by its owner or by the payment timeout.
    pub cancelled: i64,
    /// Of `cancelled`, those the payment timeout cancelled.
    pub timed_out: i64,
}
