//! Writes a batch of accepted orders to Postgres in one transaction.
//!
//! Idempotent on order id (a redelivered message inserts nothing twice) and guarded
//! by the database: the vouchers' rows are locked, no voucher gets more orders than
//! the stock Postgres has, and the unique index on a shopper's live order refuses a
//! second one. Stock is decremented by the orders actually inserted. An order the
//! guard refuses is stored as `failed` with its reason, counted and logged: it is an
//! incident (Redis admitted it), never retried.
//!
//! The common case costs one lock query, one insert and one update: the insert's
//! `ON CONFLICT DO NOTHING` answers "already there?" and "shopper already has one?"
//! itself, and only rows it skipped (rare: a redelivered batch, an incident) are
//! looked at again. Only a voucher whose batch exceeds its remaining stock (a
//! redelivery near the end of a sale, or Redis out of step) is checked order by
//! order before inserting.
mod columns;
mod ctx;
mod error;
mod late;
mod skipped;

use ctx::{order_numbers, Row};
pub use ctx::{Ctx, Outcome};
pub use error::PersistError;
pub use late::store_failed;

use crate::order::OrderMsg;
use columns::Columns;
use sqlx::PgConnection;
use std::collections::{HashMap, HashSet};

pub async fn persist(ctx: &Ctx, batch: &[OrderMsg]) -> Result<Outcome, PersistError> {
    let mut orders: Vec<OrderMsg> = batch.to_vec();
    orders.sort_by_key(|o| (o.created_ms, o.id));
    let mut seen = HashSet::new();
    orders.retain(|o| seen.insert(o.id));
    let mut outcome = Outcome {
        duplicates: batch.len() - orders.len(),
        ..Default::default()
    };
    if orders.is_empty() {
        return Ok(outcome);
    }
    let mut tx = ctx.pg.begin().await?;
    // Shared: a repair holds it exclusively while it reads Postgres and rewrites
    // Redis, so no batch commits in between.
    let (epoch, repairing, scope): (i64, bool, Option<Vec<i64>>) = sqlx::query_as(
        "SELECT epoch, repairing, CASE WHEN repair_scope_epoch = epoch THEN repair_scope END
           FROM redis_epochs WHERE namespace = $1 FOR SHARE",
    )
    .bind(ctx.keys.namespace())
    .fetch_optional(&mut *tx)
    .await?
    .unwrap_or((0, false, None));
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
    let to_create = rows.iter().filter(|(_, f)| f.is_none()).count();
    let mut numbers = order_numbers(&ctx.sequences, to_create).await?.into_iter();
    let mut cols = Columns::default();
    let mut numbered: HashMap<i64, String> = HashMap::new();
    for (o, failure) in &rows {
        let order_no = if failure.is_none() { numbers.next() } else { None };
        if let Some(n) = &order_no {
            numbered.insert(o.id, n.clone());
        }
        cols.push(o, failure.map(str::to_owned), order_no);
    }
    let inserted = cols.insert_in_tx(&mut tx).await?;
    let settled = skipped::settle(&mut tx, &ctx.sequences, &rows, inserted, numbered).await?;
    outcome.duplicates += settled.duplicates;
    outcome.id_collisions = settled.collided.len();
    outcome.number_collisions = settled.renumbered;

    let mut units: HashMap<i64, i32> = HashMap::new();
    for (o, _) in rows
        .iter()
        .filter(|(o, _)| settled.inserted.get(&o.id).is_some_and(|s| s == "created"))
    {
        *units.entry(o.voucher_id).or_default() += 1;
    }
    outcome.created = units.values().map(|n| *n as usize).sum();
    outcome.failed = settled.inserted.values().filter(|s| *s == "failed").count();
    take_stock(&mut tx, units).await?;
    tx.commit().await?;
    log_incidents(&rows, &settled);
    Ok(outcome)
}

async fn existing(tx: &mut PgConnection, ids: &[i64]) -> Result<HashSet<i64>, sqlx::Error> {
    Ok(sqlx::query_scalar("SELECT id FROM voucher_orders WHERE id = ANY($1)")
        .bind(ids)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect())
}

/// Locks the batch's vouchers (in id order, so that two workers never wait on each
/// other in a cycle) and returns the stock Postgres has for each.
async fn lock_stock(tx: &mut PgConnection, orders: &[OrderMsg]) -> Result<HashMap<i64, i32>, sqlx::Error> {
    let mut vouchers: Vec<i64> = orders.iter().map(|o| o.voucher_id).collect();
    vouchers.sort_unstable();
    vouchers.dedup();
    Ok(sqlx::query_as(
        "SELECT voucher_id, stock FROM seckill_vouchers WHERE voucher_id = ANY($1) ORDER BY voucher_id FOR UPDATE",
    )
    .bind(&vouchers)
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .collect())
}

/// For vouchers whose part of the batch exceeds their stock (a redelivery near the
/// end of a sale), sets aside the orders already stored; returns how many.
async fn drop_stored_beyond_stock(
    tx: &mut PgConnection,
    orders: &mut Vec<OrderMsg>,
    stock: &HashMap<i64, i32>,
) -> Result<usize, sqlx::Error> {
    let mut wanted: HashMap<i64, i64> = HashMap::new();
    for o in orders.iter() {
        *wanted.entry(o.voucher_id).or_default() += 1;
    }
    let beyond_stock: Vec<i64> = orders
        .iter()
        .filter(|o| {
            stock
                .get(&o.voucher_id)
                .is_some_and(|s| wanted[&o.voucher_id] > *s as i64)
        })
        .map(|o| o.id)
        .collect();
    if beyond_stock.is_empty() {
        return Ok(0);
    }
    let stored = existing(tx, &beyond_stock).await?;
    orders.retain(|o| !stored.contains(&o.id));
    Ok(stored.len())
}

/// Each order with the reason the database refuses it, if it does: within stock, in
/// admission order; the rest fails (never expected).
fn within_stock(orders: Vec<OrderMsg>, stock: &HashMap<i64, i32>, late_conflicts: &HashSet<i64>) -> Vec<Row> {
    let mut stock_left = stock.clone();
    orders
        .into_iter()
        .map(|o| {
            let failure = if late_conflicts.contains(&o.id) {
                Some(late::LATE_CONFLICT)
            } else {
                match stock_left.get_mut(&o.voucher_id) {
                    None => Some("not a flash-sale voucher in Postgres"),
                    Some(0) => Some("no stock left in Postgres"),
                    Some(n) => {
                        *n -= 1;
                        None
                    }
                }
            };
            (o, failure)
        })
        .collect()
}

/// Takes the units of the created orders from Postgres's stock.
async fn take_stock(tx: &mut PgConnection, units: HashMap<i64, i32>) -> Result<(), sqlx::Error> {
    if units.is_empty() {
        return Ok(());
    }
    let (v, n): (Vec<i64>, Vec<i32>) = units.into_iter().unzip();
    sqlx::query(
        "UPDATE seckill_vouchers s SET stock = s.stock - d.n
           FROM UNNEST($1::bigint[], $2::int[]) AS d(voucher_id, n)
          WHERE s.voucher_id = d.voucher_id",
    )
    .bind(&v)
    .bind(&n)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

fn log_incidents(rows: &[Row], settled: &skipped::Settled) {
    for (o, f) in rows
        .iter()
        .filter(|(o, f)| f.is_some() && settled.inserted.contains_key(&o.id))
    {
        tracing::error!(
            order_id = o.id,
            user_id = o.user_id,
            voucher_id = o.voucher_id,
            reason = f.unwrap_or_default(),
            "INCIDENT: Postgres refused an order Redis accepted; stored as failed"
        );
    }
    for o in &settled.refused {
        tracing::error!(
            order_id = o.id,
            user_id = o.user_id,
            voucher_id = o.voucher_id,
            "INCIDENT: the shopper already had a live order; stored as failed"
        );
    }
    for o in &settled.collided {
        tracing::error!(
            order_id = o.id,
            user_id = o.user_id,
            voucher_id = o.voucher_id,
            "INCIDENT: another order already had this id (ids issued twice); stored under a fresh id"
        );
    }
}
