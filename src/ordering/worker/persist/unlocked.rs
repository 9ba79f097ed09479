//! The batch's transaction with its vouchers locked last: the common case, where
//! Redis admitted no more orders than Postgres has stock. The rows are numbered
//! and inserted without any voucher lock, so that batches of one sale commit in
//! parallel; only then are the vouchers locked (in ascending id, as everywhere),
//! their stock checked against the units the created orders take, and taken. If
//! the stock ran short meanwhile, the transaction rolls back (its business numbers
//! are skipped, never reused) and [`super::locked`] decides order by order.
//!
//! Lock order: this transaction writes order rows before the voucher rows, which
//! the rule of [`crate::ordering::lifecycle`] forbids to a transaction that may wait
//! for an order row while it holds a voucher row. This one holds no voucher row
//! while it writes order rows, and writes none after locking them, so a
//! cancellation (voucher row, then order row) never waits for it while it waits
//! for that cancellation. Against the locked way re-persisting the same order (a
//! redelivery) a cycle is possible; Postgres aborts one of the two with "deadlock
//! detected", a passing error the worker retries.
use super::batch::{Ctx, Outcome};
use super::error::PersistError;
use super::statements::{forget_intents, lock_stock, log_incidents, read_stock, store, take_stock};
use crate::ordering::OrderMsg;
use std::collections::HashMap;

/// Persists `orders` (distinct, in admission order) if the stock suffices; `None`
/// (nothing written) otherwise.
pub(super) async fn persist_unlocked(
    ctx: &Ctx,
    orders: &[OrderMsg],
    intents: &[i64],
    mut outcome: Outcome,
) -> Result<Option<Outcome>, PersistError> {
    let mut tx = ctx.pg.begin().await?;
    let stock = read_stock(&mut tx, orders).await?;
    let mut wanted: HashMap<i64, i32> = HashMap::new();
    for o in orders {
        *wanted.entry(o.voucher_id.get()).or_default() += 1;
    }
    let short = wanted.iter().any(|(v, n)| stock.get(v).is_none_or(|s| s < n));
    if short {
        tx.rollback().await?;
        return Ok(None);
    }
    let rows: Vec<_> = orders.iter().map(|o| (*o, None)).collect();
    let (settled, units) = store(&mut tx, ctx, &rows, &mut outcome).await?;
    if !units.is_empty() {
        let batch: Vec<OrderMsg> = orders
            .iter()
            .filter(|o| units.contains_key(&o.voucher_id.get()))
            .copied()
            .collect();
        let locked = lock_stock(&mut tx, &batch).await?;
        if units.iter().any(|(v, n)| locked.get(v).is_none_or(|s| s < n)) {
            tx.rollback().await?;
            return Ok(None);
        }
        take_stock(&mut tx, units).await?;
    }
    forget_intents(&mut tx, intents).await?;
    tx.commit().await?;
    log_incidents(&rows, &settled);
    Ok(Some(outcome))
}
