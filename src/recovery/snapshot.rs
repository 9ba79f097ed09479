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

/// One order Postgres holds.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Stored {
    pub id: i64,
    /// The id its shopper holds, when it was stored under a fresh one.
    pub issued_id: Option<i64>,
    pub user_id: i64,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub status: String,
}

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
    /// Every top-up of the sale Postgres had committed.
    pub topups: Vec<i64>,
    /// In-flight orders whose shopper an intent of an older version did not name:
    /// counted, but no mark can be written for them.
    pub unnamed: usize,
}

impl Books {
    /// Units on sale after the repair: Postgres's stock less the orders in flight
    /// (never below 0; more in flight than stock is an incident, logged).
    pub fn stock_left(&self) -> i64 {
        (self.pg_stock - self.in_flight_count()).max(0)
    }

    /// Orders in flight beyond Postgres's stock (an incident: more were admitted
    /// than there was stock), if any.
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
        let mut conn = self.redis.conn().await?;
        // Each order found, and whether in an outbox.
        let mut found: Vec<(Known, bool)> = Vec::new();
        for k in 0..shards {
            // A big backlog takes a while: the lease is renewed shard by shard.
            self.renew_lease(voucher).await?;
            for o in read_outbox(
                &mut conn,
                &self.keys.outbox_at(voucher, k, shards),
                self.formats.reads(),
            )
            .await?
            {
                let known = Known {
                    id: o.id,
                    user_id: o.user_id,
                    created_ms: o.created_ms,
                };
                found.push((known, true));
            }
        }
        let relayed: Vec<(i64, Option<i64>, Option<i64>)> = sqlx::query_as(
            "SELECT x.id, x.user_id, x.created_ms
               FROM relay_intents i,
                    unnest(i.order_ids, i.voucher_ids, i.user_ids, i.created_ms) AS x(id, voucher_id, user_id, created_ms)
              WHERE i.namespace = $1 AND x.voucher_id = $2
              ORDER BY i.id",
        )
        .bind(self.namespace())
        .bind(voucher)
        .fetch_all(&self.pg)
        .await
        .context("reading the relays' intents of a sale")?;
        let mut unnamed_ids: HashSet<i64> = HashSet::new();
        for (id, user, ms) in relayed {
            match (user, ms) {
                (Some(user_id), Some(created_ms)) => found.push((
                    Known {
                        id,
                        user_id,
                        created_ms,
                    },
                    false,
                )),
                _ => {
                    unnamed_ids.insert(id);
                }
            }
        }
        let mut tx = self.pg.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        let stored: Vec<Stored> = sqlx::query_as(
            "SELECT id, issued_id, user_id, created_at, status FROM voucher_orders WHERE voucher_id = $1",
        )
        .bind(voucher)
        .fetch_all(&mut *tx)
        .await
        .context("reading a sale's orders")?;
        let pg_stock: i32 = sqlx::query_scalar("SELECT stock FROM seckill_vouchers WHERE voucher_id = $1")
            .bind(voucher)
            .fetch_one(&mut *tx)
            .await
            .context("reading a sale's stock")?;
        let topups: Vec<i64> = sqlx::query_scalar("SELECT id FROM stock_topups WHERE voucher_id = $1 ORDER BY id")
            .bind(voucher)
            .fetch_all(&mut *tx)
            .await
            .context("reading a sale's top-ups")?;
        tx.commit().await?;
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
        Ok(Books {
            pg_stock: pg_stock as i64,
            stored,
            in_flight,
            requeue,
            topups,
            unnamed,
        })
    }
}

/// Every order still in an outbox stream (relayed or not: the stream keeps an entry
/// until its relay's publish was confirmed).
pub async fn read_outbox(
    conn: &mut crate::redis_conn::Conn,
    stream: &str,
    reads: u32,
) -> Result<Vec<crate::order::OrderMsg>> {
    let mut out = Vec::new();
    let mut from = "-".to_owned();
    loop {
        let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
            .arg(stream)
            .arg(&from)
            .arg("+")
            .arg("COUNT")
            .arg(5000)
            .query_async(conn)
            .await
            .context("reading an outbox")?;
        let n = reply.ids.len();
        for e in &reply.ids {
            // An entry this binary cannot read may hold orders: counting without
            // them would rebuild the sale with units sold twice. The repair fails
            // (and is tried again) until a process that reads it repairs.
            let Some(entry) = crate::outbox::entry::parse(e, reads) else {
                anyhow::bail!(
                    "outbox {stream} holds entry {} that this binary cannot read (a newer format?): \
                     not repairing from an incomplete count",
                    e.id
                );
            };
            out.extend(entry.orders);
        }
        match reply.ids.last() {
            Some(last) if n == 5000 => from = format!("({}", last.id),
            _ => return Ok(out),
        }
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
mod tests {
    use super::{Books, Known, Stored};
    use chrono::{TimeZone, Utc};

    fn stored(id: i64, user_id: i64, status: &str) -> Stored {
        Stored {
            id,
            issued_id: None,
            user_id,
            created_at: Utc.timestamp_millis_opt(1_000 + id).unwrap(),
            status: status.to_owned(),
        }
    }

    fn known(id: i64, user_id: i64) -> Known {
        Known {
            id,
            user_id,
            created_ms: 2_000 + id,
        }
    }

    fn books(pg_stock: i64, stored: Vec<Stored>, in_flight: Vec<Known>) -> Books {
        Books {
            pg_stock,
            stored,
            in_flight,
            requeue: Vec::new(),
            topups: Vec::new(),
            unnamed: 0,
        }
    }

    /// A shopper with a live order in Postgres and another in flight is the
    /// repair's `repair_two_orders` incident, counted once per extra order; a
    /// cancelled order and another shopper's are not.
    #[test]
    fn a_shopper_with_two_admitted_orders_is_counted() {
        let b = books(
            10,
            vec![stored(1, 7, "created"), stored(2, 8, "cancelled"), stored(3, 9, "paid")],
            vec![known(4, 7), known(5, 8), known(6, 10)],
        );
        for shards in [1, 4] {
            let (by_shard, twice) = b.shards(1, shards);
            assert_eq!(twice, 1, "{shards} shards");
            let admitted: i64 = by_shard.iter().map(|s| s.admitted).sum();
            assert_eq!(admitted, 6, "every order admitted once, {shards} shards");
            let marks: usize = by_shard.iter().map(|s| s.marks.len()).sum();
            assert_eq!(marks, 4, "one mark per shopper (7, 8, 9, 10), {shards} shards");
        }
        let (_, twice) = books(10, vec![stored(1, 7, "created")], vec![known(4, 8)]).shards(1, 1);
        assert_eq!(twice, 0);
    }

    /// More orders in flight than Postgres's stock is the `repair_over_stock`
    /// incident; the repair then puts nothing on sale.
    #[test]
    fn more_in_flight_than_stock_is_over_stock() {
        let exact = books(2, Vec::new(), vec![known(1, 1), known(2, 2)]);
        assert_eq!((exact.over_stock(), exact.stock_left()), (None, 0));
        let mut over = books(2, Vec::new(), vec![known(1, 1), known(2, 2), known(3, 3)]);
        assert_eq!((over.over_stock(), over.stock_left()), (Some(1), 0));
        over.unnamed = 2;
        assert_eq!(over.over_stock(), Some(3), "unnamed orders count too");
        let under = books(5, Vec::new(), vec![known(1, 1)]);
        assert_eq!((under.over_stock(), under.stock_left()), (None, 4));
    }
}
