//! Orders a process acknowledged and still holds in memory when their shard is
//! found gone back in time, or when it learns that a repair rebuilt the shard
//! since it admitted them (a gate's log, `crate::ordering::gates`): perhaps no relay
//! read their outbox entry before Redis lost it, and then they exist nowhere else.
//!
//! Each is settled once, by the recovery desk's loop:
//! - stored in Postgres already: done;
//! - its sale still at the generation the order was admitted in (the repair has
//!   not taken the next one): recorded in an intent (`relay_intents.rescued`),
//!   which the repair counts like a relay's: it marks the shopper, takes the unit
//!   and, if the order's outbox entry is gone, writes it back to be published (an
//!   incident naming the order, `rescued_order`);
//! - its sale repaired since: once the sale is open here, `lua/late_admit.lua`
//!   counts it if its shopper's mark names it (the repair found it), admits it
//!   again if its unit and shopper are free (an incident naming it,
//!   `rescued_order`), or, if they were sold again meanwhile, it is stored
//!   `failed` (`late_conflict`).
//!
//! An order of this memory is lost for good only if its process dies before the
//! loss is noticed, or if more orders than a gate keeps came after it on its
//! shard: the write seen by one process and lost before anyone else saw it.
use super::desk::Recovery;
use super::history::ShardHistory;
use crate::ordering::OrderMsg;
use anyhow::Result;
use std::collections::HashMap;

impl Recovery {
    /// Hands orders acknowledged on shard `tag` to the desk, to be settled (see
    /// the module above).
    pub fn rescue(&self, tag: &str, orders: Vec<OrderMsg>) {
        if orders.is_empty() {
            return;
        }
        tracing::warn!(
            shard = tag,
            orders = orders.len(),
            "acknowledged orders held in memory go to the recovery desk: their shard went back in time or was rebuilt"
        );
        let mut held = self.rescued.lock().expect("rescued poisoned");
        for o in orders {
            if !held.iter().any(|(t, h)| t == tag && h.key() == o.key()) {
                held.push((tag.to_owned(), o));
            }
        }
        drop(held);
        self.wake.notify_one();
    }

    /// Keeps the orders a write at `seq` of this process acknowledged in `history`'s
    /// log of shard `tag` of `voucher`'s sale; those of an older generation than the newest known (a
    /// repair since) are handed over at once.
    pub fn keep(
        &self,
        voucher: i64,
        tag: &str,
        history: &ShardHistory,
        seq: i64,
        orders: impl IntoIterator<Item = OrderMsg>,
    ) {
        let older = history.remember(seq, orders);
        self.rescue(tag, older);
        // The sale was closed while this call was out (a shard found lost or gone
        // back): [`Recovery::lost`] took the logs already, perhaps before these
        // orders were in; they must not wait in the log for a next call on the
        // shard, which a sold-out or ended sale never makes.
        if self.closed.is_closed(voucher) {
            self.rescue(tag, history.take_log());
        }
    }

    /// How many orders wait to be settled.
    pub fn rescued_waiting(&self) -> usize {
        self.rescued.lock().expect("rescued poisoned").len()
    }

    /// Settles the orders handed over (see the module above); those it cannot yet
    /// stay for the next round.
    pub(super) async fn settle_rescued(&self) -> Result<()> {
        let todo: Vec<(String, OrderMsg)> = std::mem::take(&mut *self.rescued.lock().expect("rescued poisoned"));
        if todo.is_empty() {
            return Ok(());
        }
        let result = self.settle_rescued_now(&todo).await;
        if let Ok(left) = &result {
            self.rescued
                .lock()
                .expect("rescued poisoned")
                .extend(left.iter().cloned());
        } else {
            self.rescued.lock().expect("rescued poisoned").extend(todo);
        }
        result.map(|_| ())
    }

    /// Before a repair of `voucher` reads the intents: this process's orders of the
    /// sale held in memory go into an intent (an error stops the repair, which is
    /// tried again: it must not count without them).
    pub(super) async fn rescue_before_repair(&self, voucher: i64) -> Result<()> {
        let mine: Vec<(String, OrderMsg)> = {
            let mut held = self.rescued.lock().expect("rescued poisoned");
            let (mine, rest) = std::mem::take(&mut *held)
                .into_iter()
                .partition(|(_, o)| o.voucher_id.get() == voucher);
            *held = rest;
            mine
        };
        if mine.is_empty() {
            return Ok(());
        }
        let result = self.settle_rescued_now(&mine).await;
        let left = match &result {
            Ok(left) => left.clone(),
            Err(_) => mine,
        };
        self.rescued.lock().expect("rescued poisoned").extend(left);
        result.map(|_| ())
    }

    async fn settle_rescued_now(&self, todo: &[(String, OrderMsg)]) -> Result<Vec<(String, OrderMsg)>> {
        let vouchers: Vec<i64> = todo.iter().map(|(_, o)| o.voucher_id.get()).collect();
        let gens = self.generations(&vouchers).await?;
        let gen = |o: &OrderMsg| gens.get(&o.voucher_id.get()).copied().unwrap_or(0);
        let (current, older): (Vec<_>, Vec<_>) = todo.iter().cloned().partition(|(_, o)| o.epoch == gen(o));
        let mut left = Vec::new();
        if !current.is_empty() {
            let orders: Vec<OrderMsg> = current.iter().map(|(_, o)| *o).collect();
            let ns = self.namespace().to_owned();
            match crate::ordering::outbox::record_intent(&self.pg, &ns, &orders, &[], &self.me, true).await? {
                Some(intent) => tracing::warn!(
                    intent,
                    orders = orders.len(),
                    "acknowledged orders held in memory recorded in an intent: the repair counts them"
                ),
                // A repair took the next generation meanwhile: settled as older next round.
                None => left.extend(current),
            }
        }
        if older.is_empty() {
            return Ok(left);
        }
        let mut conn = self.redis.conn().await?;
        let gone: Vec<(OrderMsg, String)> = older.iter().map(|(t, o)| (*o, t.clone())).collect();
        let gens: HashMap<i64, i64> = gens;
        let settled = crate::ordering::outbox::settle_gone(self, &mut conn, &gone, &gens).await?;
        for o in &settled.admitted {
            self.metrics
                .worker_incidents
                .with_label_values(&["rescued_order"])
                .inc();
            tracing::error!(
                order_id = o.id.get(),
                user_id = o.user_id.get(),
                voucher_id = o.voucher_id.get(),
                "INCIDENT: an acknowledged order Redis lost going back in time, before any relay read it, \
                 was admitted again from the memory of the process that acknowledged it"
            );
        }
        left.extend(older.into_iter().filter(|(_, o)| !settled.settled.contains(&o.key())));
        Ok(left)
    }
}
