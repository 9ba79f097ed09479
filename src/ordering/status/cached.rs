//! Owners' lookups through the status board ([`super::board`]): an answer kept
//! costs no query until its order changes.
use super::board::Key;
use super::Lookup;
use crate::id::{OrderId, UserId, VoucherId};
use crate::ordering::model::Order;
use crate::recovery::Repairing;
use anyhow::Result;

impl Lookup {
    /// [`Lookup::find`] for the order's owner `owner` (or an admin: `None`, never
    /// kept), through the board.
    pub async fn find_as(&self, order_id: OrderId, owner: Option<UserId>) -> Result<Option<Order>> {
        let Some(owner) = owner else {
            return self.find(order_id, None).await;
        };
        let key = Key::Id {
            order: order_id.get(),
            owner: owner.get(),
        };
        if let Some(o) = self.board.get(&key) {
            return self.served(o).map(Some);
        }
        let ticket = self.board.ticket();
        let found = self.find(order_id, Some(owner)).await?;
        if let Some(o) = &found {
            self.board.keep(ticket, key, o);
        }
        Ok(found)
    }

    /// [`Lookup::mine`] through the board. Only a live order is kept (`pending`,
    /// `created`, `paid`): while it lives its shopper can have no other of the
    /// sale, and each of its changes is Postgres's. A shopper without one may
    /// order again, which Redis alone knows until the order is stored.
    pub async fn mine_as(&self, voucher: VoucherId, user: UserId) -> Result<Option<Order>> {
        let key = Key::Mine {
            voucher: voucher.get(),
            user: user.get(),
        };
        if let Some(o) = self.board.get(&key) {
            return self.served(o).map(Some);
        }
        let ticket = self.board.ticket();
        let found = self.mine(voucher, user).await?;
        if let Some(o) = found
            .as_ref()
            .filter(|o| ["pending", "created", "paid"].contains(&o.status.as_str()))
        {
            self.board.keep(ticket, key, o);
        }
        Ok(found)
    }

    /// A kept answer as it may be served now: a pending order of a sale closed
    /// here (a shard lost or behind, being repaired) answers 503, as a lookup
    /// would.
    fn served(&self, o: Order) -> Result<Order> {
        if o.status == "pending" && self.recovery.is_closed(o.voucher_id.get()) {
            return Err(Repairing.into());
        }
        Ok(o)
    }
}
