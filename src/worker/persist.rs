//! Writes a batch of accepted orders to Postgres in one transaction.
//!
//! Idempotent on order id (a redelivered message inserts nothing twice) and guarded
//! by the database: the vouchers' rows are locked, each order is checked against the
//! stock Postgres has and against the shopper's live orders, and only then inserted;
//! stock is decremented by the number of orders actually inserted. An order the
//! guard refuses is stored as `failed` with its reason, counted and logged: it is an
//! incident (Redis admitted it), never retried.
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
    let ids: Vec<i64> = orders.iter().map(|o| o.id).collect();
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
    let existing: HashSet<i64> = sqlx::query_scalar("SELECT id FROM voucher_orders WHERE id = ANY($1)")
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect();
    let users: Vec<i64> = orders.iter().map(|o| o.user_id).collect();
    let pairs: Vec<i64> = orders.iter().map(|o| o.voucher_id).collect();
    let mut live: HashSet<(i64, i64)> = sqlx::query_as(
        "SELECT o.user_id, o.voucher_id FROM voucher_orders o
           JOIN UNNEST($1::bigint[], $2::bigint[]) AS b(user_id, voucher_id)
             ON o.user_id = b.user_id AND o.voucher_id = b.voucher_id
          WHERE o.status IN ('created', 'paid')",
    )
    .bind(&users)
    .bind(&pairs)
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .collect();

    let mut left = stock.clone();
    let mut rows: Vec<(OrderMsg, Option<&'static str>)> = Vec::new();
    for o in orders {
        if existing.contains(&o.id) {
            outcome.duplicates += 1;
            continue;
        }
        let failure = match left.get_mut(&o.voucher_id) {
            None => Some("not a flash-sale voucher in Postgres"),
            Some(_) if live.contains(&(o.user_id, o.voucher_id)) => {
                Some("the shopper already has an order for this voucher")
            }
            Some(0) => Some("no stock left in Postgres"),
            Some(n) => {
                *n -= 1;
                live.insert((o.user_id, o.voucher_id));
                None
            }
        };
        rows.push((o, failure));
    }
    let created = rows.iter().filter(|(_, f)| f.is_none()).count();
    let mut numbers = if created > 0 {
        sequences
            .next(ORDER_RULE, ORDER_TENANT, created as u64)
            .await
            .map_err(PersistError::Numbers)?
            .ok_or_else(|| PersistError::Numbers(anyhow::anyhow!("the sequence rule 'order' is missing")))?
            .into_iter()
    } else {
        Vec::new().into_iter()
    };

    let mut cols = Columns::default();
    for (o, failure) in &rows {
        cols.id.push(o.id);
        cols.user.push(o.user_id);
        cols.voucher.push(o.voucher_id);
        cols.created_at
            .push(DateTime::from_timestamp_millis(o.created_ms).unwrap_or_else(Utc::now));
        cols.status
            .push(if failure.is_some() { "failed" } else { "created" }.to_owned());
        cols.order_no
            .push(if failure.is_none() { numbers.next() } else { None });
        cols.failure.push(failure.map(str::to_owned));
    }
    // ON CONFLICT DO NOTHING: if a concurrent transaction inserted the same id after
    // our check, the row is skipped here and counted by what RETURNING leaves out.
    let inserted: Vec<(i64, String)> = sqlx::query_as(
        "INSERT INTO voucher_orders (id, user_id, voucher_id, created_at, status, order_no, failure)
         SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::bigint[], $4::timestamptz[], $5::text[], $6::text[], $7::text[])
         ON CONFLICT DO NOTHING
         RETURNING voucher_id, status",
    )
    .bind(&cols.id)
    .bind(&cols.user)
    .bind(&cols.voucher)
    .bind(&cols.created_at)
    .bind(&cols.status)
    .bind(&cols.order_no)
    .bind(&cols.failure)
    .fetch_all(&mut *tx)
    .await?;
    let mut taken: HashMap<i64, i32> = HashMap::new();
    for (voucher, status) in &inserted {
        if status == "created" {
            *taken.entry(*voucher).or_default() += 1;
            outcome.created += 1;
        } else {
            outcome.failed += 1;
        }
    }
    outcome.duplicates += rows.len() - inserted.len();
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
    if outcome.failed > 0 {
        for (o, f) in rows.iter().filter(|(_, f)| f.is_some()) {
            tracing::error!(
                order_id = o.id,
                user_id = o.user_id,
                voucher_id = o.voucher_id,
                reason = f.unwrap_or_default(),
                "INCIDENT: Postgres refused an order Redis accepted; stored as failed"
            );
        }
    }
    Ok(outcome)
}

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
