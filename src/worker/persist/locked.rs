//! The batch's transaction with its vouchers locked first: the way that decides
//! each order against the stock as it stands, for the batches the unlocked way
//! ([`super::unlocked`]) leaves to it: orders that crossed a Redis repair, a
//! voucher whose part of the batch exceeds its stock (a redelivery near the end of
//! a sale, or Redis out of step), or a stock that ran short meanwhile.
use super::ctx::{Ctx, Outcome};
use super::error::PersistError;
use super::late;
use super::steps::{
    drop_stored_beyond_stock, epoch_row, existing, forget_intents, lock_stock, log_incidents, store, take_stock,
    within_stock,
};
use crate::order::OrderMsg;
use std::collections::HashSet;

/// Persists `orders` (distinct, in admission order) under the vouchers' locks.
pub(super) async fn persist_locked(
    ctx: &Ctx,
    mut orders: Vec<OrderMsg>,
    intents: &[i64],
    mut outcome: Outcome,
) -> Result<Outcome, PersistError> {
    let mut tx = ctx.pg.begin().await?;
    let (epoch, repairing, scope) = epoch_row(&mut tx, ctx).await?;
    // The sales a repair under way rebuilds (all of them when it has no scope).
    let rebuilt = |v: i64| repairing && scope.as_ref().is_none_or(|s| s.contains(&v));
    let stock = lock_stock(&mut tx, &orders).await?;
    outcome.duplicates += drop_stored_beyond_stock(&mut tx, &mut orders, &stock).await?;

    // Orders read in an epoch before the current one were in a relay's or worker's
    // hands while Redis was repaired: the repair did not see them. Redis must count
    // them before Postgres stores them (a sale a repair under way rebuilds is not
    // counted here: the repair reads Postgres afterwards and counts them itself).
    let mut late_conflicts = HashSet::new();
    let is_late = |o: &OrderMsg| o.epoch < epoch && !rebuilt(o.voucher_id);
    if orders.iter().any(is_late) {
        let late: Vec<i64> = orders.iter().filter(|o| is_late(o)).map(|o| o.id).collect();
        let stored = existing(&mut tx, &late).await?;
        outcome.duplicates += stored.len();
        orders.retain(|o| !stored.contains(&o.id));
        let late: Vec<&OrderMsg> = orders.iter().filter(|o| is_late(o)).collect();
        late_conflicts = late::admit_late(ctx, epoch, &late).await?;
    }
    outcome.late_conflicts = late_conflicts.len();

    let rows = within_stock(orders, &stock, &late_conflicts);
    let (settled, units) = store(&mut tx, ctx, &rows, &mut outcome).await?;
    take_stock(&mut tx, units).await?;
    forget_intents(&mut tx, intents).await?;
    tx.commit().await?;
    log_incidents(&rows, &settled);
    Ok(outcome)
}
