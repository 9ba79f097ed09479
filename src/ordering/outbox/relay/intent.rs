//! A relay's intent: before it publishes a batch, the relay records the batch's
//! orders in Postgres (`relay_intents`: each order's id, sale, shopper and time),
//! and with them its latest point of each shard its entries came from
//! (`shard_points`, see [`crate::recovery::history`]), in one statement.
//!
//! That makes the orders that may be in RabbitMQ or in a worker's hands an exact,
//! durable set: an order is in its outbox stream until its relay's publish was
//! confirmed (after its intent was recorded), and in its intent until the
//! transaction that stores it deletes the intent. A repair reads the outboxes, then
//! the intents, then Postgres, and so counts every order admitted and not lost
//! without waiting for any worker ([`crate::recovery`]). An intent is recorded only
//! while its sales are at the generation its orders were read in (see [`record`]). The points make every
//! order published a write that every process knows of: a shard that went back to
//! before it, or holds another history since, is refused by the next call of any
//! process once its points are refreshed. An intent whose publish never happened (the relay died, the broker
//! refused) leaves its orders pending in the outbox, where they are read again and
//! published under another intent.
use anyhow::{Context, Result};
use sqlx::PgPool;

use crate::ordering::OrderMsg;
use crate::recovery::Point;
use std::sync::LazyLock;

/// The statement [`record`] runs: the recovery area's hold of the sales'
/// generations and record of the points read, then the intent's insert, unless a sale
/// moved.
static RECORD: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{} INSERT INTO relay_intents (namespace, epoch, voucher_ids, order_ids, user_ids, created_ms, rescued)
         SELECT $1, 0, $2, $3, $4, $5, $11 WHERE NOT EXISTS (SELECT 1 FROM moved)
         RETURNING id",
        crate::recovery::GENERATIONS_HELD
    )
});

/// Records `orders` as about to be published, and `points` (shard tag, the
/// latest point read of it) as `writer`'s; returns the intent's id (the message
/// carries it). `rescued`: the orders are a process's memory of orders it
/// acknowledged (see `crate::recovery::rescue`), not a relay's read. `None` when a sale of the batch is no longer at the generation its
/// orders are of ([`OrderMsg::epoch`]): a repair took the next one since they were
/// read, and may not have counted them (the relay settles them again, see
/// [`super::read_before_repair`]).
///
/// The statement holds the sales' `sale_states` rows shared while it checks their
/// generations and inserts; a repair takes the next generation by updating the row,
/// so it waits for the statement (one statement: milliseconds, whatever the relay
/// process does meanwhile) and reads the intents after it: an intent recorded is
/// one the next repair counts.
pub async fn record(
    pg: &PgPool,
    namespace: &str,
    orders: &[OrderMsg],
    points: &[(String, Point)],
    writer: &str,
    rescued: bool,
) -> Result<Option<i64>> {
    let vouchers: Vec<i64> = orders.iter().map(|o| o.voucher_id.get()).collect();
    let ids: Vec<i64> = orders.iter().map(|o| o.id.get()).collect();
    let users: Vec<i64> = orders.iter().map(|o| o.user_id.get()).collect();
    let times: Vec<i64> = orders.iter().map(|o| o.created_ms).collect();
    let gens: Vec<i64> = orders.iter().map(|o| o.epoch).collect();
    let mut points: Vec<(&str, Point)> = points.iter().map(|(t, p)| (t.as_str(), *p)).collect();
    // In one order, so that two relays never wait for each other's rows in a cycle.
    points.sort_unstable_by(|a, b| a.0.cmp(b.0));
    points.dedup_by(|a, b| a.0 == b.0);
    let tags: Vec<&str> = points.iter().map(|(t, _)| *t).collect();
    let seqs: Vec<i64> = points.iter().map(|(_, p)| p.seq).collect();
    let names: Vec<Vec<u8>> = points.iter().map(|(_, p)| p.name.to_vec()).collect();
    // One statement, one round trip, one commit.
    sqlx::query_scalar(&RECORD)
        .bind(namespace)
        .bind(&vouchers)
        .bind(&ids)
        .bind(&users)
        .bind(&times)
        .bind(&gens)
        .bind(&tags)
        .bind(&seqs)
        .bind(&names)
        .bind(writer)
        .bind(rescued)
        .fetch_optional(pg)
        .await
        .context("recording a relay intent")
}

/// Deletes the intents whose orders are all in `voucher_orders` (under their id, or
/// under a fresh one with `issued_id` naming it, as the shopper and sale the intent names:
/// another shopper's order under the same id is not theirs; nothing of them can
/// still arrive); returns how many. An intent of an older version names no
/// shoppers: its orders are matched by id alone. Safe at any time: a stored order stays stored. The worker
/// deletes a batch's intents in the transaction that stores it
/// ([`crate::ordering::worker::persist::persist_relayed`]); this takes what that leaves (the
/// intent of a message the database refused, stored as failed; of a publish that
/// failed, whose orders went out again under another intent).
pub async fn sweep(pg: &PgPool, namespace: &str) -> Result<u64> {
    Ok(sqlx::query(
        "DELETE FROM relay_intents i WHERE i.namespace = $1
            AND NOT EXISTS (SELECT 1 FROM unnest(i.order_ids, i.user_ids, i.voucher_ids) AS x(id, u, v)
                             WHERE x.id IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM voucher_orders o
                                 WHERE (o.id = x.id OR o.issued_id = x.id)
                                   AND (x.u IS NULL OR (o.user_id = x.u AND o.voucher_id = x.v))))",
    )
    .bind(namespace)
    .execute(pg)
    .await
    .context("sweeping relay intents")?
    .rows_affected())
}

/// The orders of the sale `voucher` in this namespace's intents, the oldest intent
/// first, as (id, shopper, admission ms, whether a rescue recorded it); an intent
/// of an older version names no shopper nor time.
pub async fn orders_of_sale(
    pg: &PgPool,
    namespace: &str,
    voucher: i64,
) -> Result<Vec<(i64, Option<i64>, Option<i64>, bool)>> {
    sqlx::query_as(
        "SELECT x.id, x.user_id, x.created_ms, i.rescued
           FROM relay_intents i,
                unnest(i.order_ids, i.voucher_ids, i.user_ids, i.created_ms) AS x(id, voucher_id, user_id, created_ms)
          WHERE i.namespace = $1 AND x.voucher_id = $2
          ORDER BY i.id",
    )
    .bind(namespace)
    .bind(voucher)
    .fetch_all(pg)
    .await
    .context("reading the relays' intents of a sale")
}
