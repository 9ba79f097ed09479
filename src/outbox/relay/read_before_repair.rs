//! Orders a relay read before a repair of their sale (their generation is not the
//! sale's now). A repair counts every order in an outbox or an intent when it reads
//! them; an order this relay read before the repair and had not recorded yet is
//! counted only if its entry was still in the outbox then. So, for each:
//!
//! - its entry is still in its outbox: it was there when the repair read the
//!   outboxes (entries leave only once published, after their intent): counted.
//!   It is published as of the sale's generation now;
//! - its entry is gone (Redis lost it, going back in time): the repair did not
//!   count it. If Postgres has it, it is done. Otherwise `lua/late_admit.lua`, on a
//!   shard the repair has reopened (its floor is at least the new generation, its
//!   stock key present), counts it if its unit and its shopper are free and writes
//!   it back into the outbox as a new entry, which a relay publishes like any other;
//!   if its shopper's mark already names it, it is counted (a repair found its
//!   intent); if its unit or shopper was sold again meanwhile, the relay stores it
//!   `failed` (an incident, logged and counted: the order was acknowledged and
//!   cannot be honoured);
//! - its sale is closed here or the shard not reopened yet: it is held by this
//!   relay and settled again a second later. An order held here exists nowhere else
//!   (its entry is gone): a relay that dies holding it loses it, which is the write
//!   seen by one process and lost before anyone else saw it that no detector can
//!   bring back (README, Durability).
use super::{Origin, Relay};
use crate::id::OrderKey;
use crate::keys::Keys;
use crate::order::OrderMsg;
use crate::recovery::GEN;
use crate::redis_conn::Conn;
use anyhow::{Context, Result};
use redis::Script;
use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

static LATE_ADMIT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/late_admit.lua")));

/// The failure of an order whose unit or shopper was sold again, by a repair that
/// could not count it, before its relay published it.
pub const LATE_CONFLICT: &str =
    "read by a relay before Redis went back in time; its unit or shopper was sold again before it was published";

impl Relay {
    /// Settles orders whose generation is not their sale's in `gens` (see the
    /// module above): returns those to publish now, as of their sale's generation;
    /// those held are in `self.held.orders` (this round's included), the others done.
    pub(super) async fn settle_stale(
        &self,
        conn: &mut Conn,
        stale: Vec<(OrderMsg, Origin)>,
        gens: &HashMap<i64, i64>,
    ) -> Result<Vec<(OrderMsg, Origin)>> {
        let (publish, gone) = still_in_outbox(conn, stale, gens).await?;
        if gone.is_empty() {
            return Ok(publish);
        }
        // Held from here on until settled: an error below leaves them held.
        self.hold(&gone);
        let settled = self.settle_gone(conn, &gone, gens).await?;
        self.held
            .orders
            .lock()
            .expect("held poisoned")
            .retain(|(o, _)| !settled.contains(&o.key()));
        Ok(publish)
    }

    /// Settles orders whose entry is gone: stored already, admitted again by
    /// `lua/late_admit.lua`, or stored `failed`. Returns those settled (by
    /// [`OrderKey`]); the others stay held.
    async fn settle_gone(
        &self,
        conn: &mut Conn,
        gone: &[(OrderMsg, Origin)],
        gens: &HashMap<i64, i64>,
    ) -> Result<HashSet<OrderKey>> {
        let stored = self.stored(gone).await?;
        let mut failed: Vec<(OrderMsg, String)> = Vec::new();
        let mut settled: HashSet<OrderKey> = HashSet::new();
        for (o, origin) in gone {
            if stored.contains(&o.key()) {
                settled.insert(o.key());
                continue;
            }
            if self.recovery.is_closed(o.voucher_id.get()) {
                continue;
            }
            let gen = gens.get(&o.voucher_id.get()).copied().unwrap_or(0);
            let floor = self.recovery.floors.get(&origin.tag).max(gen * GEN);
            let format = self.recovery.formats.writes();
            let (code, seq) = late_admit(conn, &self.keys, &origin.tag, o, floor, format).await?;
            match code {
                1 | 2 => {
                    self.recovery.floors.raise(&origin.tag, seq);
                    settled.insert(o.key());
                }
                0 => failed.push((*o, origin.tag.clone())),
                -4 => self.recovery.lost(
                    o.voucher_id.get(),
                    "a shard went back in time (a late order found it behind)",
                ),
                // Not loaded: lost, or closed by the repair and not reopened yet.
                _ => {}
            }
        }
        if !failed.is_empty() {
            self.store_late_conflicts(conn, &failed).await?;
            settled.extend(failed.iter().map(|(o, _)| o.key()));
        }
        Ok(settled)
    }

    /// Stores as `failed` late orders whose unit or shopper was sold again (each
    /// with its shard's tag), counts them as admitted on their shards, and reports
    /// each as an incident.
    async fn store_late_conflicts(&self, conn: &mut Conn, failed: &[(OrderMsg, String)]) -> Result<()> {
        let orders: Vec<OrderMsg> = failed.iter().map(|(o, _)| *o).collect();
        crate::worker::persist::store_failed(&self.pg, &orders, LATE_CONFLICT)
            .await
            .context("storing late orders that cannot be honoured")?;
        // Counted as admitted in Redis, as a repair counts every stored order
        // (failed ones too): the sale's audit then shows the failures, and its
        // units and orders still add up (src/voucher/audit/books.rs).
        let mut per_shard: HashMap<&str, i64> = HashMap::new();
        for (_, tag) in failed {
            *per_shard.entry(tag).or_default() += 1;
        }
        for (tag, n) in per_shard {
            let _: i64 = redis::cmd("INCRBY")
                .arg(self.keys.of_tag(tag, "admitted"))
                .arg(n)
                .query_async(conn)
                .await
                .context("counting late orders that cannot be honoured")?;
        }
        for o in &orders {
            self.metrics
                .worker_incidents
                .with_label_values(&["late_conflict"])
                .inc();
            tracing::error!(
                order_id = o.id.get(),
                user_id = o.user_id.get(),
                voucher_id = o.voucher_id.get(),
                "INCIDENT: an order read before Redis went back in time was sold again before it was \
                 published; stored as failed"
            );
        }
        Ok(())
    }

    /// Which of `orders` Postgres holds, as (id its shopper holds, shopper, voucher).
    async fn stored(&self, orders: &[(OrderMsg, Origin)]) -> Result<HashSet<OrderKey>> {
        let ids: Vec<i64> = orders.iter().map(|(o, _)| o.id.get()).collect();
        let rows: Vec<(i64, Option<i64>, i64, i64)> = sqlx::query_as(
            "SELECT id, issued_id, user_id, voucher_id FROM voucher_orders WHERE id = ANY($1) OR issued_id = ANY($1)",
        )
        .bind(&ids)
        .fetch_all(&self.pg)
        .await
        .context("looking for late orders in Postgres")?;
        Ok(rows
            .into_iter()
            .flat_map(|(id, issued, user, voucher)| {
                [
                    Some(OrderKey::of(id, user, voucher)),
                    issued.map(|i| OrderKey::of(i, user, voucher)),
                ]
            })
            .flatten()
            .collect())
    }

    /// Holds orders (whose entry is gone) until they are settled; each once.
    pub(super) fn hold(&self, orders: &[(OrderMsg, Origin)]) {
        let mut held = self.held.orders.lock().expect("held poisoned");
        for (o, origin) in orders {
            if !held
                .iter()
                .any(|(h, _)| h.id == o.id && h.user_id == o.user_id && h.voucher_id == o.voucher_id)
            {
                held.push((
                    *o,
                    Origin {
                        entry: None,
                        ..origin.clone()
                    },
                ));
            }
        }
    }
}

/// `lua/late_admit.lua` for `o` on the shard `tag`; an entry it writes is of
/// `format` (see `crate::outbox::format`).
async fn late_admit(
    conn: &mut Conn,
    keys: &Keys,
    tag: &str,
    o: &OrderMsg,
    floor: i64,
    format: u32,
) -> Result<(i64, i64)> {
    LATE_ADMIT
        .key(keys.of_tag(tag, "stock"))
        .key(keys.of_tag(tag, "buyers"))
        .key(keys.of_tag(tag, "admitted"))
        .key(keys.of_tag(tag, "returned"))
        .key(keys.of_tag(tag, "outbox"))
        .key(keys.of_tag(tag, "seq"))
        .arg(o.voucher_id.get())
        .arg(o.user_id.get())
        .arg(o.id.get())
        .arg(o.created_ms)
        .arg(floor)
        .arg(format)
        .invoke_async(conn)
        .await
        .context("late_admit.lua")
}

/// Splits stale orders into those whose entry is still in its outbox (to publish,
/// now of their sale's generation in `gens`) and those whose entry is gone (their
/// origin without an entry).
async fn still_in_outbox(
    conn: &mut Conn,
    stale: Vec<(OrderMsg, Origin)>,
    gens: &HashMap<i64, i64>,
) -> Result<(Vec<(OrderMsg, Origin)>, Vec<(OrderMsg, Origin)>)> {
    let mut publish = Vec::new();
    let mut gone = Vec::new();
    // Whether each entry is still in its outbox (an entry carries many orders).
    let mut present: HashMap<(String, String), bool> = HashMap::new();
    for (mut o, origin) in stale {
        let gen = gens.get(&o.voucher_id.get()).copied().unwrap_or(0);
        if let Some(entry) = &origin.entry {
            let there = match present.get(entry) {
                Some(t) => *t,
                None => {
                    let found: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
                        .arg(&entry.0)
                        .arg(&entry.1)
                        .arg(&entry.1)
                        .query_async(conn)
                        .await
                        .context("looking for a stale order's outbox entry")?;
                    present.insert(entry.clone(), !found.ids.is_empty());
                    !found.ids.is_empty()
                }
            };
            if there {
                o.epoch = gen;
                publish.push((o, origin));
                continue;
            }
        }
        gone.push((o, Origin { entry: None, ..origin }));
    }
    Ok((publish, gone))
}
