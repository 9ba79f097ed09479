//! [`Canceller`]: who cancels an order, and so which order row a cancellation
//! acts on and what it records.
use crate::id::{OrderId, UserId};
use anyhow::{Context, Result};
use sqlx::PgConnection;

/// Who cancels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Canceller {
    /// The owner, through the API.
    Owner(UserId),
    /// The payment window ran out (its timeout message names the id the shopper
    /// holds).
    Timeout,
    /// The backstop of lost timeout messages ([`Lifecycle::sweep_unpaid`]): the
    /// order stored under exactly this id.
    ///
    /// [`Lifecycle::sweep_unpaid`]: crate::ordering::lifecycle::Lifecycle::sweep_unpaid
    Stale,
}

impl Canceller {
    /// The owner cancelling; None for the payment timeout and the sweep (both
    /// recorded as `timeout`).
    pub(super) fn owner(self) -> Option<UserId> {
        match self {
            Self::Owner(u) => Some(u),
            Self::Timeout | Self::Stale => None,
        }
    }

    /// The row (its stored id, its voucher) that a cancellation of `order_id` by
    /// this canceller acts on, read in `tx` (see `Lifecycle::cancel_in_pg`).
    pub(super) async fn order_row(self, tx: &mut PgConnection, order_id: OrderId) -> Result<Option<(i64, i64)>> {
        match self {
            Self::Owner(u) => {
                sqlx::query_as(
                    "SELECT id, voucher_id FROM voucher_orders
                      WHERE (id = $1 OR issued_id = $1) AND user_id = $2
                      ORDER BY (id = $1) DESC, id LIMIT 1",
                )
                .bind(order_id)
                .bind(u)
                .fetch_optional(&mut *tx)
                .await
            }
            Self::Timeout => {
                sqlx::query_as(
                    "SELECT id, voucher_id FROM voucher_orders
                      WHERE (id = $1 OR issued_id = $1) AND status = 'created'
                      ORDER BY (id = $1) DESC, id LIMIT 1",
                )
                .bind(order_id)
                .fetch_optional(&mut *tx)
                .await
            }
            Self::Stale => {
                sqlx::query_as("SELECT id, voucher_id FROM voucher_orders WHERE id = $1")
                    .bind(order_id)
                    .fetch_optional(&mut *tx)
                    .await
            }
        }
        .context("finding the order to cancel")
    }
}
