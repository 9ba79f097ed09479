//! Orders a relay read before a repair of their sale (their generation is older
//! than the sale's now). A repair counts every order in an outbox or an intent when
//! it reads them; an order this relay read before the repair and had not recorded
//! yet is counted only if its entry was still in the outbox then. So, for each:
//!
//! - its entry is still in its outbox: it was there when the repair read the
//!   outboxes (entries leave only once published, after their intent): counted.
//!   It is published as of the sale's generation now;
//! - its entry is gone (Redis lost it, going back in time): the repair did not
//!   count it. `lua/late_admit.lua` counts it now if its unit and its shopper are
//!   free (or its shopper's mark already names it), and it is published; if they
//!   were sold again meanwhile, it is stored `failed` (an incident, logged and
//!   counted: the order was acknowledged and cannot be honoured);
//! - its sale is closed (a repair under way, the shard lost): it is held by this
//!   relay and tried again next round. An order held here exists nowhere else (its
//!   entry is gone): a relay that dies holding it loses it, which is the write
//!   seen by one process and lost before anyone else saw it that no detector can
//!   bring back (README, Durability).
use super::{Origin, Relay};
use crate::keys::Keys;
use crate::order::OrderMsg;
use crate::redis_conn::Conn;
use anyhow::{Context, Result};
use redis::Script;
use std::collections::HashMap;
use std::sync::LazyLock;

static LATE_ADMIT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/late_admit.lua")));

/// The failure of an order whose unit or shopper was sold again, by a repair that
/// could not count it, before its relay published it.
pub const LATE_CONFLICT: &str =
    "read by a relay before Redis went back in time; its unit or shopper was sold again before it was published";

/// What became of the stale orders of a round.
#[derive(Default)]
pub struct Settled {
    /// Orders to publish now, as of their sale's generation now.
    pub publish: Vec<(OrderMsg, Origin)>,
    /// Orders whose sale is closed: held for the next round.
    pub held: Vec<(OrderMsg, Origin)>,
}

impl Relay {
    /// Each sale's generation in Postgres (rows made for sales that have none, so
    /// that an intent can hold them shared).
    pub(super) async fn generations(&self, vouchers: &[i64]) -> Result<HashMap<i64, i64>> {
        let mut vouchers = vouchers.to_vec();
        vouchers.sort_unstable();
        vouchers.dedup();
        sqlx::query(
            "INSERT INTO sale_states (namespace, voucher_id) SELECT $1, v FROM unnest($2::bigint[]) AS v
             ON CONFLICT DO NOTHING",
        )
        .bind(self.keys.namespace())
        .bind(&vouchers)
        .execute(&self.pg)
        .await
        .context("making the sales' states")?;
        let rows: Vec<(i64, i64)> =
            sqlx::query_as("SELECT voucher_id, gen FROM sale_states WHERE namespace = $1 AND voucher_id = ANY($2)")
                .bind(self.keys.namespace())
                .bind(&vouchers)
                .fetch_all(&self.pg)
                .await
                .context("reading the sales' generations")?;
        Ok(rows.into_iter().collect())
    }

    /// Settles the stale orders of a round (see the module above). `stale` are the
    /// orders whose generation is below their sale's in `gens`.
    pub(super) async fn settle_stale(
        &self,
        conn: &mut Conn,
        stale: Vec<(OrderMsg, Origin)>,
        gens: &HashMap<i64, i64>,
    ) -> Result<Settled> {
        let mut out = Settled::default();
        let mut failed: Vec<OrderMsg> = Vec::new();
        for (mut o, origin) in stale {
            let gen = gens.get(&o.voucher_id).copied().unwrap_or(0);
            if let Some((stream, id)) = &origin.entry {
                let found: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
                    .arg(stream)
                    .arg(id)
                    .arg(id)
                    .query_async(conn)
                    .await
                    .context("looking for a stale order's outbox entry")?;
                if !found.ids.is_empty() {
                    o.epoch = gen;
                    out.publish.push((o, origin));
                    continue;
                }
            }
            if self.recovery.is_closed(o.voucher_id) {
                out.held.push((o, origin));
                continue;
            }
            let (code, seq) =
                late_admit(conn, &self.keys, &origin.tag, &o, self.recovery.floors.get(&origin.tag)).await?;
            match code {
                1 => {
                    self.recovery.floors.raise(&origin.tag, seq);
                    o.epoch = gen;
                    out.publish.push((o, Origin { entry: None, ..origin }));
                }
                0 => failed.push(o),
                _ => {
                    self.recovery.lost(
                        o.voucher_id,
                        if code == -4 {
                            "a shard went back in time (a late order found it behind)"
                        } else {
                            "a shard's stock is missing in Redis (a late order found it)"
                        },
                    );
                    out.held.push((o, Origin { entry: None, ..origin }));
                }
            }
        }
        if !failed.is_empty() {
            crate::worker::persist::store_failed(&self.pg, &failed, LATE_CONFLICT)
                .await
                .context("storing late orders that cannot be honoured")?;
            for o in &failed {
                self.metrics
                    .worker_incidents
                    .with_label_values(&["late_conflict"])
                    .inc();
                tracing::error!(
                    order_id = o.id,
                    user_id = o.user_id,
                    voucher_id = o.voucher_id,
                    "INCIDENT: an order read before Redis went back in time was sold again before it was \
                     published; stored as failed"
                );
            }
        }
        Ok(out)
    }

    /// Holds orders for the next round.
    pub(super) fn hold(&self, orders: Vec<(OrderMsg, Origin)>) {
        if !orders.is_empty() {
            tracing::warn!(
                orders = orders.len(),
                "orders read before a repair of their sale, held until it is open again"
            );
            self.held.lock().expect("held poisoned").extend(orders);
            self.left_pending.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// `lua/late_admit.lua` for `o` on the shard `tag`.
async fn late_admit(conn: &mut Conn, keys: &Keys, tag: &str, o: &OrderMsg, floor: i64) -> Result<(i64, i64)> {
    LATE_ADMIT
        .key(keys.of_tag(tag, "stock"))
        .key(keys.of_tag(tag, "buyers"))
        .key(keys.of_tag(tag, "admitted"))
        .key(keys.of_tag(tag, "seq"))
        .arg(o.user_id)
        .arg(o.id)
        .arg(o.created_ms)
        .arg(floor)
        .invoke_async(conn)
        .await
        .context("late_admit.lua")
}
