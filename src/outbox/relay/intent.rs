//! A relay's intent: before it publishes a batch, the relay records the batch's
//! orders in Postgres (`relay_intents`), in a transaction that holds the epoch row
//! shared and checks that the epoch the relay read the orders in is still current
//! and no repair is under way.
//!
//! That makes the orders that may be in RabbitMQ or in a worker's hands an exact,
//! durable set: a repair takes the epoch row exclusively to start a new epoch, so
//! once it has, no relay can add an intent of an older epoch (its transaction waits
//! for the repair's, then sees the new epoch and refuses), and whatever older intent
//! exists was committed before. The repair's barrier ([`crate::epoch`]) waits until
//! each of those orders is in `voucher_orders` or still in its outbox stream; no
//! count of a queue and no quiet period is needed. An intent whose publish never
//! happened (the relay died, the broker refused) leaves its orders pending in the
//! outbox, where the barrier finds them, and they are published again later.
use anyhow::{Context, Result};
use sqlx::PgPool;

use crate::order::OrderMsg;

/// Records `orders`, read in `epoch`, as about to be published; returns the intent's
/// id (the message carries it). `None` when the epoch moved on or a repair of one of
/// their sales is under way: the relay must not publish them (they stay pending in
/// the outbox, for the repair to read and for a later round). A repair of other
/// sales only (`repair_scope`) does not stop them.
pub async fn record(pg: &PgPool, namespace: &str, epoch: i64, orders: &[OrderMsg]) -> Result<Option<i64>> {
    let vouchers: Vec<i64> = orders.iter().map(|o| o.voucher_id).collect();
    let ids: Vec<i64> = orders.iter().map(|o| o.id).collect();
    // One statement, one round trip: the row lock (shared) is held to its commit.
    sqlx::query_scalar(
        "INSERT INTO relay_intents (namespace, epoch, voucher_ids, order_ids)
         SELECT e.namespace, e.epoch, $3, $4 FROM redis_epochs e
          WHERE e.namespace = $1 AND e.epoch = $2
            AND (NOT e.repairing
                 OR (e.repair_scope_epoch = e.epoch AND e.repair_scope IS NOT NULL AND NOT e.repair_scope && $3))
            FOR SHARE
         RETURNING id",
    )
    .bind(namespace)
    .bind(epoch)
    .bind(&vouchers)
    .bind(&ids)
    .fetch_optional(pg)
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

/// The orders of sales in `scope` (`None`: any) of intents older than `epoch` that
/// are not in `voucher_orders`, with their vouchers: published (or about to be) and
/// not stored yet.
pub async fn unstored_before(
    pg: &PgPool,
    namespace: &str,
    epoch: i64,
    scope: Option<&[i64]>,
) -> Result<Vec<(i64, i64)>> {
    sqlx::query_as(
        "SELECT DISTINCT x.id, x.voucher_id
           FROM relay_intents i, unnest(i.order_ids, i.voucher_ids) AS x(id, voucher_id)
          WHERE i.namespace = $1 AND i.epoch < $2
            AND ($3::bigint[] IS NULL OR x.voucher_id = ANY($3))
            AND NOT EXISTS (SELECT 1 FROM voucher_orders o WHERE o.id = x.id)
            AND NOT EXISTS (SELECT 1 FROM voucher_orders o WHERE o.issued_id = x.id)",
    )
    .bind(namespace)
    .bind(epoch)
    .bind(scope)
    .fetch_all(pg)
    .await
    .context("reading the orders relayed and not stored")
}
