//! What a repair reads of a sale, in the order that finds every order admitted and
//! not lost: the outboxes, then the relays' intents, then Postgres in one snapshot
//! (see the module above).
use super::desk::Recovery;
use anyhow::{Context, Result};
use std::collections::{HashMap, HashSet};

/// One order a repair knows of: its id (the one its shopper holds), its shopper
/// and its admission time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Known {
    pub id: i64,
    pub user_id: i64,
    pub created_ms: i64,
}

pub use crate::ordering::stored::Stored;

/// A sale's books as a repair read them.
pub struct Books {
    /// Postgres's stock (total stock less its live orders), in the snapshot.
    pub pg_stock: i64,
    pub stored: Vec<Stored>,
    /// Orders admitted and not in Postgres (in an outbox or a relay's intent), each
    /// once, in the order they were found.
    pub in_flight: Vec<Known>,
    /// Those of them found in an intent only (their outbox entry is gone): written
    /// back into their outbox by the repair, so that they are published again
    /// (their first publish may never have reached the broker, or the broker may
    /// have lost it; a second publish of one that did is stored once).
    pub requeue: Vec<Known>,
    /// Those of them a process recorded from its memory of orders it acknowledged
    /// (a rescue, `super::rescue`): their outbox entry went with Redis going back,
    /// before any relay read it. Each is an incident, named.
    pub rescued: Vec<Known>,
    /// Every top-up of the sale Postgres had committed.
    pub topups: Vec<i64>,
    /// Units kept off sale for the shards' quarantined outbox entries (see
    /// `super::quarantine`).
    pub held_back: i64,
    /// In-flight orders whose shopper an intent of an older version did not name:
    /// counted, but no mark can be written for them.
    pub unnamed: usize,
}

impl Books {
    /// Units on sale after the repair: Postgres's stock less the orders in flight
    /// (never below 0; more in flight than stock is an incident, logged).
    pub fn stock_left(&self) -> i64 {
        (self.pg_stock - self.in_flight_count() - self.held_back).max(0)
    }

    /// Orders in flight beyond Postgres's stock (an incident: more were admitted
    /// than there was stock), if any. (Units held back for quarantined entries are
    /// a bound, not orders: they never make this.)
    pub fn over_stock(&self) -> Option<i64> {
        let over = self.in_flight_count() - self.pg_stock;
        (over > 0).then_some(over)
    }

    fn in_flight_count(&self) -> i64 {
        (self.in_flight.len() + self.unnamed) as i64
    }
}

impl Recovery {
    /// Reads the sale's outboxes, then the relays' intents, then Postgres (one
    /// snapshot: its orders, stock and top-ups), and puts them together. Called
    /// after every shard was reset (nothing can be admitted meanwhile).
    pub(super) async fn books(&self, voucher: i64, shards: u32) -> Result<Books> {
        // Each order found, and whether in an outbox.
        let (mut found, held_back) = self.in_outboxes(voucher, shards).await?;
        let relayed = crate::ordering::outbox::intent_orders_of_sale(&self.pg, self.namespace(), voucher).await?;
        let mut unnamed_ids: HashSet<i64> = HashSet::new();
        // Orders of rescues (a process's memory), and of relays' reads: a rescued
        // order a relay read too was not lost with its entry before anyone read it.
        let mut rescued: HashSet<(i64, i64)> = HashSet::new();
        let mut read: HashSet<(i64, i64)> = HashSet::new();
        for (id, user, ms, from_memory) in relayed {
            match (user, ms) {
                (Some(user_id), Some(created_ms)) => {
                    match from_memory {
                        true => rescued.insert((id, user_id)),
                        false => read.insert((id, user_id)),
                    };
                    found.push((
                        Known {
                            id,
                            user_id,
                            created_ms,
                        },
                        false,
                    ))
                }
                _ => {
                    unnamed_ids.insert(id);
                }
            }
        }
        let (stored, pg_stock, topups) = self.in_postgres(voucher).await?;
        let mut books = put_together(voucher, found, &unnamed_ids, stored, pg_stock, topups);
        books.held_back = held_back;
        books.rescued = books
            .requeue
            .iter()
            .filter(|o| rescued.contains(&(o.id, o.user_id)) && !read.contains(&(o.id, o.user_id)))
            .copied()
            .collect();
        Ok(books)
    }

    /// The orders in the sale's outboxes, each marked as found in one, and the
    /// units its quarantined entries hold back (corrupt entries met now are
    /// quarantined: `super::quarantine`).
    async fn in_outboxes(&self, voucher: i64, shards: u32) -> Result<(Vec<(Known, bool)>, i64)> {
        let mut conn = self.redis.conn().await?;
        let mut found = Vec::new();
        let mut held_back = 0;
        for k in 0..shards {
            let read = crate::ordering::outbox::read_outbox(
                &mut conn,
                &self.keys.outbox_at(voucher, k, shards),
                self.formats.reads(),
            )
            .await?;
            held_back += self.quarantine(&mut conn, voucher, k, shards, &read.corrupt).await?;
            for o in read.orders {
                let known = Known {
                    id: o.id.get(),
                    user_id: o.user_id.get(),
                    created_ms: o.created_ms,
                };
                found.push((known, true));
            }
        }
        Ok((found, held_back))
    }

    /// The sale's orders, stock and top-ups in Postgres, in one snapshot.
    async fn in_postgres(&self, voucher: i64) -> Result<(Vec<Stored>, i32, Vec<i64>)> {
        let mut tx = self.pg.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        let stored = crate::ordering::stored::of_sale(&mut *tx, voucher)
            .await
            .context("reading a sale's orders")?;
        let pg_stock = crate::sales::pg_stock::of(&mut *tx, voucher)
            .await
            .context("reading a sale's stock")?;
        let topups = crate::sales::topup::ids_of_sale(&mut *tx, voucher)
            .await
            .context("reading a sale's top-ups")?;
        tx.commit().await?;
        Ok((stored, pg_stock, topups))
    }
}

/// A sale's books from the orders found in its outboxes and intents (`found`, in
/// that order, each marked whether in an outbox; `unnamed_ids` those of intents
/// that name no shopper) and what Postgres holds.
fn put_together(
    voucher: i64,
    found: Vec<(Known, bool)>,
    unnamed_ids: &HashSet<i64>,
    stored: Vec<Stored>,
    pg_stock: i32,
    topups: Vec<i64>,
) -> Books {
    // An order is identified by its id *and* its shopper: two orders that share
    // an id (ids issued twice) are two orders. A stored order also answers to the
    // id its shopper holds (issued_id) when it was stored under a fresh one.
    let mut known: HashSet<(i64, i64)> = HashSet::new();
    for s in &stored {
        known.insert((s.id, s.user_id));
        if let Some(issued) = s.issued_id {
            known.insert((issued, s.user_id));
        }
    }
    let stored_ids: HashSet<i64> = stored
        .iter()
        .flat_map(|s| [Some(s.id), s.issued_id])
        .flatten()
        .collect();
    let mut in_flight = Vec::new();
    let mut requeue = Vec::new();
    for (o, in_outbox) in found {
        if known.insert((o.id, o.user_id)) {
            in_flight.push(o);
            if !in_outbox {
                requeue.push(o);
            }
        }
    }
    let unnamed = unnamed_ids.iter().filter(|id| !stored_ids.contains(id)).count();
    if unnamed > 0 {
        tracing::warn!(
            voucher,
            orders = unnamed,
            "orders in flight under relay intents of an older version (no shopper named): counted, not marked"
        );
    }
    Books {
        pg_stock: pg_stock as i64,
        stored,
        in_flight,
        requeue,
        rescued: Vec::new(),
        topups,
        held_back: 0,
        unnamed,
    }
}

/// Per shard, what a repair writes back (see [`Books`]).
pub struct Shard {
    /// user -> "order id:created_ms", the marks of live and in-flight orders.
    pub marks: HashMap<i64, String>,
    pub admitted: i64,
    pub returned: Vec<i64>,
}

impl Books {
    /// Each shard's marks, admitted count and returned orders, and how many
    /// shoppers were found with two admitted orders (an incident, logged here).
    pub fn shards(&self, voucher: i64, shards: u32) -> (Vec<Shard>, usize) {
        let mut twice = 0;
        let shard_of = |user: i64| crate::keys::shard_of(user, shards) as usize;
        let mut out: Vec<Shard> = (0..shards)
            .map(|_| Shard {
                marks: HashMap::new(),
                admitted: 0,
                returned: Vec::new(),
            })
            .collect();
        for o in &self.stored {
            let s = &mut out[shard_of(o.user_id)];
            s.admitted += 1;
            match o.status.as_str() {
                "created" | "paid" => {
                    let id = o.issued_id.unwrap_or(o.id);
                    s.marks
                        .insert(o.user_id, format!("{id}:{}", o.created_at.timestamp_millis()));
                }
                "cancelled" => s.returned.push(o.id),
                _ => {}
            }
        }
        for o in &self.in_flight {
            let s = &mut out[shard_of(o.user_id)];
            s.admitted += 1;
            if let Some(other) = s.marks.insert(o.user_id, format!("{}:{}", o.id, o.created_ms)) {
                tracing::error!(
                    voucher,
                    user_id = o.user_id,
                    order_id = o.id,
                    other = %other,
                    "INCIDENT: a shopper has two admitted orders (one in flight)"
                );
                twice += 1;
            }
        }
        if let Some(first) = out.first_mut() {
            first.admitted += self.unnamed as i64;
        }
        (out, twice)
    }
}

#[cfg(test)]
mod tests;
