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
use crate::order::OrderMsg;
use crate::sequence::{Sequences, ORDER_RULE, ORDER_TENANT};

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use std::collections::{HashMap, HashSet};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub created: usize,
    pub duplicates: usize,
    pub failed: usize,
}

async fn existing(tx: &mut sqlx::PgConnection, ids: &[i64]) -> Result<HashSet<i64>, sqlx::Error> {
    Ok(sqlx::query_scalar("SELECT id FROM voucher_orders WHERE id = ANY($1)")
        .bind(ids)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect())
}

pub async fn persist(pg: &PgPool, sequences: &Sequences, batch: &[OrderMsg]) -> Result<Outcome, PersistError> {
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
    let mut vouchers: Vec<i64> = orders.iter().map(|o| o.voucher_id).collect();
    vouchers.sort_unstable();
    vouchers.dedup();

    let mut tx = pg.begin().await?;
    // Locked in id order so that two workers never wait on each other in a cycle.
    let stock: HashMap<i64, i32> = sqlx::query_as(
        "SELECT voucher_id, stock FROM seckill_vouchers WHERE voucher_id = ANY($1) ORDER BY voucher_id FOR UPDATE",
    )
    .bind(&vouchers)
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .collect();

    // Vouchers whose batch exceeds their stock: set aside what is already stored.
    let mut wanted: HashMap<i64, i64> = HashMap::new();
    for o in &orders {
        *wanted.entry(o.voucher_id).or_default() += 1;
    }
    let tight: Vec<i64> = orders
        .iter()
        .filter(|o| {
            stock
                .get(&o.voucher_id)
                .is_some_and(|s| wanted[&o.voucher_id] > *s as i64)
        })
        .map(|o| o.id)
        .collect();
    if !tight.is_empty() {
        let stored = existing(&mut tx, &tight).await?;
        outcome.duplicates += stored.len();
        orders.retain(|o| !stored.contains(&o.id));
    }

    // Within stock, in admission order; the rest fails (never expected).
    let mut left = stock.clone();
    let mut rows: Vec<(OrderMsg, Option<&'static str>)> = Vec::with_capacity(orders.len());
    for o in orders {
        let failure = match left.get_mut(&o.voucher_id) {
            None => Some("not a flash-sale voucher in Postgres"),
            Some(0) => Some("no stock left in Postgres"),
            Some(n) => {
                *n -= 1;
                None
            }
        };
        rows.push((o, failure));
    }
    let to_create = rows.iter().filter(|(_, f)| f.is_none()).count();
    let mut numbers = if to_create > 0 {
        sequences
            .next(ORDER_RULE, ORDER_TENANT, to_create as u64)
            .await
            .map_err(PersistError::Numbers)?
            .ok_or_else(|| PersistError::Numbers(anyhow::anyhow!("the sequence rule 'order' is missing")))?
            .into_iter()
    } else {
        Vec::new().into_iter()
    };
    let mut cols = Columns::default();
    for (o, failure) in &rows {
        let order_no = if failure.is_none() { numbers.next() } else { None };
        cols.push(o, failure.map(str::to_owned), order_no);
    }
    let inserted = cols.insert(&mut tx).await?;

    // Rows the insert skipped: already stored (a redelivery), or the shopper already
    // has a live order (the unique index refused it: an incident).
    let skipped: Vec<&OrderMsg> = rows
        .iter()
        .map(|(o, _)| o)
        .filter(|o| !inserted.contains_key(&o.id))
        .collect();
    let mut refused = Vec::new();
    if !skipped.is_empty() {
        let ids: Vec<i64> = skipped.iter().map(|o| o.id).collect();
        let stored = existing(&mut tx, &ids).await?;
        outcome.duplicates += stored.len();
        let mut again = Columns::default();
        for o in skipped.into_iter().filter(|o| !stored.contains(&o.id)) {
            again.push(
                o,
                Some("the shopper already has an order for this voucher".into()),
                None,
            );
            refused.push(*o);
        }
        if !again.id.is_empty() {
            outcome.failed += again.insert(&mut tx).await?.len();
        }
    }

    let mut taken: HashMap<i64, i32> = HashMap::new();
    for (o, _) in rows
        .iter()
        .filter(|(o, _)| inserted.get(&o.id).is_some_and(|s| s == "created"))
    {
        *taken.entry(o.voucher_id).or_default() += 1;
    }
    outcome.created = taken.values().map(|n| *n as usize).sum();
    outcome.failed += inserted.values().filter(|s| *s == "failed").count();
    if !taken.is_empty() {
        let (v, n): (Vec<i64>, Vec<i32>) = taken.into_iter().unzip();
        sqlx::query(
            "UPDATE seckill_vouchers s SET stock = s.stock - d.n
               FROM UNNEST($1::bigint[], $2::int[]) AS d(voucher_id, n)
              WHERE s.voucher_id = d.voucher_id",
        )
        .bind(&v)
        .bind(&n)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    for (o, f) in rows.iter().filter(|(o, f)| f.is_some() && inserted.contains_key(&o.id)) {
        tracing::error!(
            order_id = o.id,
            user_id = o.user_id,
            voucher_id = o.voucher_id,
            reason = f.unwrap_or_default(),
            "INCIDENT: Postgres refused an order Redis accepted; stored as failed"
        );
    }
    for o in refused {
        tracing::error!(
            order_id = o.id,
            user_id = o.user_id,
            voucher_id = o.voucher_id,
            "INCIDENT: the shopper already had a live order; stored as failed"
        );
    }
    Ok(outcome)
}

/// Column arrays for one `INSERT ... SELECT FROM UNNEST(...)`.
#[derive(Default)]
struct Columns {
    id: Vec<i64>,
    user: Vec<i64>,
    voucher: Vec<i64>,
    created_at: Vec<DateTime<Utc>>,
    status: Vec<String>,
    order_no: Vec<Option<String>>,
    failure: Vec<Option<String>>,
}

impl Columns {
    fn push(&mut self, o: &OrderMsg, failure: Option<String>, order_no: Option<String>) {
        self.id.push(o.id);
        self.user.push(o.user_id);
        self.voucher.push(o.voucher_id);
        self.created_at
            .push(DateTime::from_timestamp_millis(o.created_ms).unwrap_or_else(Utc::now));
        self.status
            .push(if failure.is_some() { "failed" } else { "created" }.to_owned());
        self.order_no.push(order_no);
        self.failure.push(failure);
    }

    /// Inserts the rows no constraint refuses; returns id -> status of those inserted.
    async fn insert(&self, tx: &mut sqlx::PgConnection) -> Result<HashMap<i64, String>, sqlx::Error> {
        let rows: Vec<(i64, String)> = sqlx::query_as(
            "INSERT INTO voucher_orders (id, user_id, voucher_id, created_at, status, order_no, failure)
             SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::bigint[], $4::timestamptz[], $5::text[], $6::text[], $7::text[])
             ON CONFLICT DO NOTHING
             RETURNING id, status",
        )
        .bind(&self.id)
        .bind(&self.user)
        .bind(&self.voucher)
        .bind(&self.created_at)
        .bind(&self.status)
        .bind(&self.order_no)
        .bind(&self.failure)
        .fetch_all(&mut *tx)
        .await?;
        Ok(rows.into_iter().collect())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("postgres: {0}")]
    Db(#[from] sqlx::Error),
    #[error("order numbers: {0:#}")]
    Numbers(anyhow::Error),
}

impl PersistError {
    /// Whether trying again later may succeed (the database or Redis is down or
    /// busy), as opposed to a batch the database refuses as such.
    pub fn is_transient(&self) -> bool {
        match self {
            PersistError::Numbers(_) => true,
            PersistError::Db(sqlx::Error::Database(db)) => {
                // Data exceptions, integrity violations and SQL errors will fail again.
                let class = db
                    .code()
                    .map(|c| c.chars().take(2).collect::<String>())
                    .unwrap_or_default();
                !matches!(class.as_str(), "22" | "23" | "42")
            }
            PersistError::Db(
                sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) | sqlx::Error::TypeNotFound { .. },
            ) => false,
            PersistError::Db(_) => true,
        }
    }
}
