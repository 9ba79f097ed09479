//! Writes a batch of accepted orders to Postgres in one transaction.
//!
//! Idempotent on the order (its id, shopper and voucher: a redelivered message
//! inserts nothing twice, and an order that only shares another's id is stored
//! under a fresh one, never taken for a repeat) and guarded
//! by the database: the vouchers' rows are locked, no voucher gets more orders than
//! the stock Postgres has, and the unique index on a shopper's live order refuses a
//! second one. Stock is decremented by the orders actually inserted. An order the
//! guard refuses is stored as `failed` with its reason, counted and logged: it is an
//! incident (Redis admitted it), never retried. Nothing here reads Redis: an order
//! in flight across a repair of its sale was counted by that repair
//! ([`crate::recovery`]) and is stored like any other.
//!
//! The common case ([`unlocked`]) reads the stock, inserts, then locks the vouchers
//! and takes the units: batches of one sale insert in parallel and wait for each
//! other only for the update and the commit. The rows go in by one `COPY`; if one
//! of them conflicts (rare: a redelivered batch, an incident), the rows go in
//! again by `INSERT ... ON CONFLICT DO NOTHING`, which answers "already there?"
//! and "shopper already has one?" itself, and only the rows it skipped are looked
//! at again. A batch
//! with more orders than a voucher's stock (a redelivery near the end of a sale,
//! or Redis out of step), goes the [`locked`] way: vouchers locked first, each
//! order checked against the stock.
mod batch;
mod columns;
mod conflicts;
mod error;
mod locked;
mod refused;
mod statements;
mod unlocked;

pub use batch::{Ctx, Outcome};
pub use error::PersistError;
pub use refused::store_failed;

use crate::ordering::OrderMsg;
use std::collections::HashSet;

/// Persists `batch` (orders in any order, repeats allowed) in one transaction, as
/// the module says; returns what became of its orders.
///
/// Not to be cancelled half way (run it to its end, or drop it only with the pool
/// about to close): a `COPY` dropped after its last message and before its answer
/// would leave its pooled connection one answer behind (sqlx does not count the
/// answer of a `COPY`). The worker never drops it before the shutdown's deadline,
/// after which the pools close.
pub async fn persist(ctx: &Ctx, batch: &[OrderMsg]) -> Result<Outcome, PersistError> {
    persist_relayed(ctx, batch, &[]).await
}

/// [`persist`], and the relay's intents of the batch's messages (`intents`) are
/// deleted in the same transaction: once its orders are stored nothing of them can
/// still arrive (see [`crate::ordering::outbox::relay::intent`]), and one commit per batch
/// is one WAL flush where a second transaction took another.
pub async fn persist_relayed(ctx: &Ctx, batch: &[OrderMsg], intents: &[i64]) -> Result<Outcome, PersistError> {
    let mut orders: Vec<OrderMsg> = batch.to_vec();
    orders.sort_by_key(|o| (o.created_ms, o.id));
    // Repeats (a message delivered twice, merged into one batch) go once; two
    // orders that share only an id are both kept (see `skipped`).
    let mut seen = HashSet::with_capacity(orders.len());
    orders.retain(|o| seen.insert(o.key()));
    let outcome = Outcome {
        duplicates: batch.len() - orders.len(),
        ..Default::default()
    };
    if orders.is_empty() {
        return Ok(outcome);
    }
    if let Some(done) = unlocked::persist_unlocked(ctx, &orders, intents, outcome).await? {
        return Ok(done);
    }
    locked::persist_locked(ctx, orders, intents, outcome).await
}
