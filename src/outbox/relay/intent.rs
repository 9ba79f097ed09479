//! A relay's intent: before it publishes a batch, the relay records the batch's
//! orders in Postgres (`relay_intents`: each order's id, sale, shopper and time),
//! and with them the highest sequence of each shard its entries came from
//! (`shard_floors`), in one statement.
//!
//! That makes the orders that may be in RabbitMQ or in a worker's hands an exact,
//! durable set: an order is in its outbox stream until its relay's publish was
//! confirmed (after its intent was recorded), and in its intent until the
//! transaction that stores it deletes the intent. A repair reads the outboxes, then
//! the intents, then Postgres, and so counts every order admitted and not lost
//! without waiting for any worker ([`crate::recovery`]). The floors make every
//! order published a write that every process knows of: a shard that went back to
//! before it is refused by the next call of any process once its floors are
//! refreshed. An intent whose publish never happened (the relay died, the broker
//! refused) leaves its orders pending in the outbox, where they are read again and
//! published under another intent.
use anyhow::{Context, Result};
use sqlx::PgPool;

use crate::order::OrderMsg;

/// Records `orders` as about to be published, and `floors` (shard tag, highest
/// sequence read) as the shards' floors; returns the intent's id (the message
/// carries it).
pub async fn record(pg: &PgPool, namespace: &str, orders: &[OrderMsg], floors: &[(String, i64)]) -> Result<i64> {
    let vouchers: Vec<i64> = orders.iter().map(|o| o.voucher_id).collect();
    let ids: Vec<i64> = orders.iter().map(|o| o.id).collect();
    let users: Vec<i64> = orders.iter().map(|o| o.user_id).collect();
    let times: Vec<i64> = orders.iter().map(|o| o.created_ms).collect();
    let (tags, seqs): (Vec<&str>, Vec<i64>) = floors.iter().map(|(t, s)| (t.as_str(), *s)).unzip();
    // One statement, one round trip, one commit.
    sqlx::query_scalar(
        "WITH floors AS (
             INSERT INTO shard_floors (namespace, tag, seq)
             SELECT $1, t, max(s) FROM unnest($6::text[], $7::bigint[]) AS x(t, s) GROUP BY t
             ON CONFLICT (namespace, tag) DO UPDATE SET seq = GREATEST(shard_floors.seq, EXCLUDED.seq)
         )
         INSERT INTO relay_intents (namespace, epoch, voucher_ids, order_ids, user_ids, created_ms)
         VALUES ($1, 0, $2, $3, $4, $5)
         RETURNING id",
    )
    .bind(namespace)
    .bind(&vouchers)
    .bind(&ids)
    .bind(&users)
    .bind(&times)
    .bind(&tags)
    .bind(&seqs)
    .fetch_one(pg)
    .await
    .context("recording a relay intent")
}

/// Deletes the intents whose orders are all in `voucher_orders` (under their id, or
/// under a fresh one with `issued_id` naming it: nothing of them can still arrive);
/// returns how many. Safe at any time: a stored order stays stored. The worker
/// deletes a batch's intents in the transaction that stores it
/// ([`crate::worker::persist::persist_relayed`]); this takes what that leaves (the
/// intent of a message the database refused, stored as failed; of a publish that
/// failed, whose orders went out again under another intent).
pub async fn sweep(pg: &PgPool, namespace: &str) -> Result<u64> {
    Ok(sqlx::query(
        "DELETE FROM relay_intents i WHERE i.namespace = $1
            AND NOT EXISTS (SELECT 1 FROM unnest(i.order_ids) AS x(id) WHERE NOT (
                    EXISTS (SELECT 1 FROM voucher_orders o WHERE o.id = x.id)
                    OR EXISTS (SELECT 1 FROM voucher_orders o WHERE o.issued_id = x.id)))",
    )
    .bind(namespace)
    .execute(pg)
    .await
    .context("sweeping relay intents")?
    .rows_affected())
}
