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
//!   bring back (docs/DEPLOYMENT.md, "Durability").
use super::{Origin, Relay};
use crate::id::OrderKey;
use crate::ordering::OrderMsg;
use crate::recovery::history::Point;
use crate::recovery::side::{Side, SideWrite};
use crate::redis_conn::Conn;
use anyhow::{Context, Result};
use redis::Script;
use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

static LATE_ADMIT: LazyLock<Script> = LazyLock::new(|| Script::new(crate::shard_script!("late_admit")));

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
        let gone: Vec<(OrderMsg, String)> = gone.into_iter().map(|(o, origin)| (o, origin.tag)).collect();
        let settled = settle_gone(&self.recovery, conn, &gone, gens).await?.settled;
        self.held
            .orders
            .lock()
            .expect("held poisoned")
            .retain(|(o, _)| !settled.contains(&o.key()));
        Ok(publish)
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

/// What [`settle_gone`] did.
#[derive(Default)]
pub struct Settled {
    /// The orders settled (stored already, counted by the shard, admitted again,
    /// or stored `failed`); the others are to be tried again later.
    pub settled: HashSet<OrderKey>,
    /// Those of them `lua/late_admit.lua` admitted again now.
    pub admitted: Vec<OrderMsg>,
}

/// Settles orders (each with its shard's tag) whose outbox entry is gone and that
/// no repair counted: stored already, admitted again by `lua/late_admit.lua`, or
/// stored `failed` (an incident); those whose sale is closed here, or whose shard
/// is not reopened yet, are left. `gens`: the sales' generations.
pub async fn settle_gone(
    recovery: &crate::recovery::Recovery,
    conn: &mut Conn,
    gone: &[(OrderMsg, String)],
    gens: &HashMap<i64, i64>,
) -> Result<Settled> {
    let stored = stored(&recovery.pg, gone).await?;
    let mut failed: Vec<(OrderMsg, String)> = Vec::new();
    let mut out = Settled::default();
    for (o, tag) in gone {
        if stored.contains(&o.key()) {
            out.settled.insert(o.key());
            continue;
        }
        if recovery.is_closed(o.voucher_id.get()) {
            continue;
        }
        let gen = gens.get(&o.voucher_id.get()).copied().unwrap_or(0);
        let w = late_admit(recovery, conn, tag, o, gen).await?;
        if !w.acked {
            // Short of its replicas: tried again later (counted once: the mark).
            continue;
        }
        let code = w.code;
        match code {
            1 | 2 => {
                out.settled.insert(o.key());
                if code == 1 {
                    out.admitted.push(*o);
                }
            }
            0 => failed.push((*o, tag.clone())),
            -4 => recovery.lost(
                o.voucher_id.get(),
                "a shard went back in time (a late order found it behind)",
            ),
            // Not loaded: lost, or closed by the repair and not reopened yet.
            _ => {}
        }
    }
    if !failed.is_empty() {
        store_late_conflicts(recovery, conn, &failed).await?;
        out.settled.extend(failed.iter().map(|(o, _)| o.key()));
    }
    Ok(out)
}

/// Stores as `failed` late orders whose unit or shopper was sold again (each
/// with its shard's tag), counts them as admitted on their shards, and reports
/// each as an incident.
async fn store_late_conflicts(
    recovery: &crate::recovery::Recovery,
    conn: &mut Conn,
    failed: &[(OrderMsg, String)],
) -> Result<()> {
    let orders: Vec<OrderMsg> = failed.iter().map(|(o, _)| *o).collect();
    crate::ordering::worker::persist::store_failed(&recovery.pg, &orders, LATE_CONFLICT)
        .await
        .context("storing late orders that cannot be honoured")?;
    // Counted as admitted in Redis, as a repair counts every stored order
    // (failed ones too): the sale's audit then shows the failures, and its
    // units and orders still add up (src/reports/books.rs).
    let mut per_shard: HashMap<&str, i64> = HashMap::new();
    for (_, tag) in failed {
        *per_shard.entry(tag).or_default() += 1;
    }
    for (tag, n) in per_shard {
        let _: i64 = redis::cmd("INCRBY")
            .arg(recovery.keys.of_tag(tag, "admitted"))
            .arg(n)
            .query_async(conn)
            .await
            .context("counting late orders that cannot be honoured")?;
    }
    for o in &orders {
        recovery
            .metrics
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
async fn stored(pg: &sqlx::PgPool, orders: &[(OrderMsg, String)]) -> Result<HashSet<OrderKey>> {
    let ids: Vec<i64> = orders.iter().map(|(o, _)| o.id.get()).collect();
    let rows: Vec<(i64, Option<i64>, i64, i64)> = sqlx::query_as(
        "SELECT id, issued_id, user_id, voucher_id FROM voucher_orders WHERE id = ANY($1) OR issued_id = ANY($1)",
    )
    .bind(&ids)
    .fetch_all(pg)
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

/// `lua/late_admit.lua` for `o` on the shard `tag` (a side write, passing the
/// sale's generation `gen` as a point too); an entry it writes is of the format
/// this process writes (see `crate::ordering::outbox::format`).
async fn late_admit(
    recovery: &crate::recovery::Recovery,
    conn: &mut Conn,
    tag: &str,
    o: &OrderMsg,
    gen: i64,
) -> Result<SideWrite> {
    let keys = &recovery.keys;
    let side = Side {
        tag,
        script: &LATE_ADMIT,
        keys: ["stock", "buyers", "admitted", "returned", "outbox", "seq", "hist"]
            .iter()
            .map(|k| keys.of_tag(tag, k))
            .collect(),
        also: Some(Point::gen_start(gen)),
        reads: crate::recovery::side::wrote_on_one,
    };
    let format = recovery.formats.writes();
    recovery
        .side_write(conn, side, |call| {
            vec![
                o.voucher_id.get().to_string().into_bytes(),
                o.user_id.get().to_string().into_bytes(),
                o.id.get().to_string().into_bytes(),
                o.created_ms.to_string().into_bytes(),
                call.seqs().into_bytes(),
                call.names(),
                call.name.to_vec(),
                format.to_string().into_bytes(),
            ]
        })
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
