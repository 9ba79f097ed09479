//! The steps a batch's transaction is made of, shared by both ways of persisting
//! it ([`super::locked`] and [`super::unlocked`]): the vouchers' stock (read, or
//! locked), storing the rows, and taking the units.
use super::batch::{order_numbers, Ctx, Outcome, Row};
use super::columns::Columns;
use super::conflicts::{self, existing, Settled};
use super::error::PersistError;
use crate::ordering::OrderMsg;
use sqlx::PgConnection;
use std::collections::HashMap;

/// The stock Postgres has for each of the batch's vouchers, as last committed,
/// without locking anything.
pub(super) async fn read_stock(tx: &mut PgConnection, orders: &[OrderMsg]) -> Result<HashMap<i64, i32>, sqlx::Error> {
    crate::sales::pg_stock::read(tx, &vouchers_of(orders)).await
}

/// Numbers the rows to create, inserts every row, settles the rows the insert
/// skipped, and counts them in `outcome`; returns what settling found and the
/// units each voucher's created orders take.
pub(super) async fn store(
    tx: &mut PgConnection,
    ctx: &Ctx,
    rows: &[Row],
    outcome: &mut Outcome,
) -> Result<(Settled, HashMap<i64, i32>), PersistError> {
    let to_create = rows.iter().filter(|(_, f)| f.is_none()).count();
    let mut numbers = order_numbers(&ctx.sequences, to_create).await?.into_iter();
    let mut cols = Columns::default();
    for (o, failure) in rows {
        let order_no = if failure.is_none() { numbers.next() } else { None };
        cols.push(o, failure.map(str::to_owned), order_no);
    }
    let settled = match cols.insert_in_tx(&mut *tx).await? {
        // The common case: every row went in with the status it was given.
        None => Settled::as_given(),
        Some(inserted) => {
            outcome.tolerant_inserts += 1;
            conflicts::settle(&mut *tx, &ctx.sequences, rows, inserted, cols.numbered()).await?
        }
    };
    outcome.duplicates += settled.duplicates;
    outcome.id_collisions = settled.collided.len();
    outcome.number_collisions = settled.renumbered;
    let mut units: HashMap<i64, i32> = HashMap::new();
    for row in rows {
        match settled.status_of(row) {
            Some("created") => *units.entry(row.0.voucher_id.get()).or_default() += 1,
            Some("failed") => outcome.failed += 1,
            _ => {}
        }
    }
    outcome.created = units.values().map(|n| *n as usize).sum();
    Ok((settled, units))
}

/// Locks the batch's vouchers (in id order, so that two workers never wait on each
/// other in a cycle) and returns the stock Postgres has for each.
pub(super) async fn lock_stock(tx: &mut PgConnection, orders: &[OrderMsg]) -> Result<HashMap<i64, i32>, sqlx::Error> {
    crate::sales::pg_stock::lock(tx, &vouchers_of(orders)).await
}

/// The batch's vouchers, each once, in id order.
fn vouchers_of(orders: &[OrderMsg]) -> Vec<i64> {
    let mut vouchers: Vec<i64> = orders.iter().map(|o| o.voucher_id.get()).collect();
    vouchers.sort_unstable();
    vouchers.dedup();
    vouchers
}

/// For vouchers whose part of the batch exceeds their stock (a redelivery near the
/// end of a sale), sets aside the orders already stored; returns how many.
pub(super) async fn drop_stored_beyond_stock(
    tx: &mut PgConnection,
    orders: &mut Vec<OrderMsg>,
    stock: &HashMap<i64, i32>,
) -> Result<usize, sqlx::Error> {
    let mut wanted: HashMap<i64, i64> = HashMap::new();
    for o in orders.iter() {
        *wanted.entry(o.voucher_id.get()).or_default() += 1;
    }
    let beyond_stock: Vec<i64> = orders
        .iter()
        .filter(|o| {
            stock
                .get(&o.voucher_id.get())
                .is_some_and(|s| wanted[&o.voucher_id.get()] > *s as i64)
        })
        .map(|o| o.id.get())
        .collect();
    if beyond_stock.is_empty() {
        return Ok(0);
    }
    let stored = existing(tx, &beyond_stock).await?;
    let before = orders.len();
    orders.retain(|o| !stored.contains(&o.key()));
    Ok(before - orders.len())
}

/// Each order with the reason the database refuses it, if it does: within stock, in
/// admission order; the rest fails (never expected).
pub(super) fn within_stock(orders: Vec<OrderMsg>, stock: &HashMap<i64, i32>) -> Vec<Row> {
    let mut stock_left = stock.clone();
    orders
        .into_iter()
        .map(|o| {
            let failure = match stock_left.get_mut(&o.voucher_id.get()) {
                None => Some("not a flash-sale voucher in Postgres"),
                Some(0) => Some("no stock left in Postgres"),
                Some(n) => {
                    *n -= 1;
                    None
                }
            };
            (o, failure)
        })
        .collect()
}

/// Takes the units of the created orders from Postgres's stock.
pub(super) async fn take_stock(tx: &mut PgConnection, units: HashMap<i64, i32>) -> Result<(), sqlx::Error> {
    crate::sales::pg_stock::take(tx, units).await
}

/// Deletes the relay's intents of a batch whose orders this transaction stores
/// (last, after the vouchers' rows: the lock order stays as it was).
pub(super) async fn forget_intents(tx: &mut PgConnection, intents: &[i64]) -> Result<(), sqlx::Error> {
    if intents.is_empty() {
        return Ok(());
    }
    sqlx::query("DELETE FROM relay_intents WHERE id = ANY($1)")
        .bind(intents)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

pub(super) fn log_incidents(rows: &[Row], settled: &Settled) {
    for (o, f) in rows.iter().filter(|r| r.1.is_some() && settled.status_of(r).is_some()) {
        tracing::error!(
            order_id = o.id.get(),
            user_id = o.user_id.get(),
            voucher_id = o.voucher_id.get(),
            reason = f.unwrap_or_default(),
            "INCIDENT: Postgres refused an order Redis accepted; stored as failed"
        );
    }
    for o in &settled.refused {
        tracing::error!(
            order_id = o.id.get(),
            user_id = o.user_id.get(),
            voucher_id = o.voucher_id.get(),
            "INCIDENT: the shopper already had a live order; stored as failed"
        );
    }
    for o in &settled.collided {
        tracing::error!(
            order_id = o.id.get(),
            user_id = o.user_id.get(),
            voucher_id = o.voucher_id.get(),
            "INCIDENT: another order already had this id (ids issued twice); stored under a fresh id"
        );
    }
}
