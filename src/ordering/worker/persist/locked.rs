//! The batch's transaction with its vouchers locked first: the way that decides
//! each order against the stock as it stands, for the batches the unlocked way
//! ([`super::unlocked`]) leaves to it: a voucher whose part of the batch exceeds
//! its stock (a redelivery near the end of a sale, or Redis out of step), or a
//! stock that ran short meanwhile.
use super::batch::{Ctx, Outcome};
use super::error::PersistError;
use super::statements::{
    drop_stored_beyond_stock, forget_intents, lock_stock, log_incidents, store, take_stock, within_stock,
};
use crate::ordering::OrderMsg;

/// Persists `orders` (distinct, in admission order) under the vouchers' locks.
pub(super) async fn persist_locked(
    ctx: &Ctx,
    mut orders: Vec<OrderMsg>,
    intents: &[i64],
    mut outcome: Outcome,
) -> Result<Outcome, PersistError> {
    let mut tx = ctx.pg.begin().await?;
    let stock = lock_stock(&mut tx, &orders).await?;
    outcome.duplicates += drop_stored_beyond_stock(&mut tx, &mut orders, &stock).await?;
    let rows = within_stock(orders, &stock);
    let (settled, units) = store(&mut tx, ctx, &rows, &mut outcome).await?;
    take_stock(&mut tx, units).await?;
    forget_intents(&mut tx, intents).await?;
    tx.commit().await?;
    log_incidents(&rows, &settled);
    Ok(outcome)
}
