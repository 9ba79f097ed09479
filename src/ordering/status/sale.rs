//! A sale's orders counted, for the admin views and the live numbers.
use super::Lookup;
use crate::id::VoucherId;
use anyhow::{Context, Result};

impl Lookup {
    /// How far the relay is behind on the sale's outboxes.
    pub async fn relay_state(&self, voucher: VoucherId, shards: u32) -> Result<crate::ordering::outbox::RelayState> {
        crate::ordering::outbox::relay_state(&self.redis, &self.keys, voucher.get(), shards).await
    }

    /// Orders of the sale persisted (failed ones excluded).
    pub async fn persisted_of_sale(&self, voucher: VoucherId) -> Result<i64> {
        crate::ordering::stored::persisted_of_sale(&self.pg, voucher.get())
            .await
            .context("counting a sale's persisted orders")
    }

    /// Orders of the sale the payment timeout cancelled (the consumer of expired
    /// payment windows, or the sweep behind it).
    pub async fn timed_out_of_sale(&self, voucher: VoucherId) -> Result<i64> {
        crate::ordering::stored::timed_out_of_sale(&self.pg, voucher.get())
            .await
            .context("counting timed-out orders")
    }
}
