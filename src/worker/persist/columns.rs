//! Column arrays for one `INSERT ... SELECT FROM UNNEST(...)` of orders.
use crate::order::OrderMsg;
use chrono::{DateTime, Utc};
use std::collections::HashMap;

const UNIQUE_VIOLATION: &str = "23505";

/// The rows of [`Columns`], one parameter per column.
const INSERT: &str = "INSERT INTO voucher_orders (id, user_id, voucher_id, created_at, status, order_no, failure, issued_id)
     SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::bigint[], $4::timestamptz[], $5::text[], $6::text[], $7::text[], $8::bigint[])";

/// `q` (a query of [`INSERT`]) with the columns of `c` bound in order.
macro_rules! bind_columns {
    ($q:expr, $c:expr) => {
        $q.bind(&$c.id)
            .bind(&$c.user)
            .bind(&$c.voucher)
            .bind(&$c.created_at)
            .bind(&$c.status)
            .bind(&$c.order_no)
            .bind(&$c.failure)
            .bind(&$c.issued)
    };
}

/// Column arrays for one `INSERT ... SELECT FROM UNNEST(...)`.
#[derive(Default)]
pub struct Columns {
    /// The id the order was admitted with (differs from `id` for a reissued order).
    pub original: Vec<i64>,
    issued: Vec<Option<i64>>,
    pub id: Vec<i64>,
    user: Vec<i64>,
    voucher: Vec<i64>,
    created_at: Vec<DateTime<Utc>>,
    status: Vec<String>,
    order_no: Vec<Option<String>>,
    failure: Vec<Option<String>>,
}

impl Columns {
    pub fn push(&mut self, o: &OrderMsg, failure: Option<String>, order_no: Option<String>) {
        self.push_as(o, o.id, failure, order_no);
        self.issued.pop();
        self.issued.push(None);
    }

    /// The order under the id `id` (a fresh one when its own was taken).
    pub fn push_as(&mut self, o: &OrderMsg, id: i64, failure: Option<String>, order_no: Option<String>) {
        self.original.push(o.id);
        self.issued.push(Some(o.id));
        self.id.push(id);
        self.user.push(o.user_id);
        self.voucher.push(o.voucher_id);
        self.created_at
            .push(DateTime::from_timestamp_millis(o.created_ms).unwrap_or_else(Utc::now));
        self.status
            .push(if failure.is_some() { "failed" } else { "created" }.to_owned());
        self.order_no.push(order_no);
        self.failure.push(failure);
    }

    /// Inserts the rows no constraint refuses; returns id -> status of those
    /// inserted.
    pub async fn insert(&self, conn: &mut sqlx::PgConnection) -> Result<HashMap<i64, String>, sqlx::Error> {
        self.insert_with(conn, "ON CONFLICT DO NOTHING").await
    }

    /// [`Columns::insert`] within a transaction (it takes a savepoint).
    ///
    /// First as they are, all or none: in the common case (no row is stored yet,
    /// no shopper has a live order) that costs Postgres about a quarter less than
    /// `ON CONFLICT DO NOTHING`, which probes every unique index before each row.
    /// If a row conflicts (a redelivered batch, an incident), that attempt is
    /// rolled back to its savepoint and the rows no constraint refuses are
    /// inserted, the others skipped for the caller to settle.
    pub async fn insert_in_tx(&self, tx: &mut sqlx::PgConnection) -> Result<HashMap<i64, String>, sqlx::Error> {
        sqlx::query("SAVEPOINT fresh_orders").execute(&mut *tx).await?;
        // No row comes back: when every row went in, each has the status it was
        // given.
        match bind_columns!(sqlx::query(INSERT), self).execute(&mut *tx).await {
            Ok(done) if done.rows_affected() == self.id.len() as u64 => {
                sqlx::query("RELEASE SAVEPOINT fresh_orders").execute(&mut *tx).await?;
                Ok(self.id.iter().copied().zip(self.status.iter().cloned()).collect())
            }
            // Fewer rows than given without an error (never expected: nothing on
            // the table drops a row) is settled as a conflict is, from what the
            // tolerant insert reports.
            Ok(_) => self.insert_again(tx).await,
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(UNIQUE_VIOLATION) => {
                self.insert_again(tx).await
            }
            Err(e) => Err(e),
        }
    }

    /// Back to the savepoint, then the rows no constraint refuses.
    async fn insert_again(&self, tx: &mut sqlx::PgConnection) -> Result<HashMap<i64, String>, sqlx::Error> {
        sqlx::query("ROLLBACK TO SAVEPOINT fresh_orders")
            .execute(&mut *tx)
            .await?;
        self.insert_with(tx, "ON CONFLICT DO NOTHING").await
    }

    async fn insert_with(
        &self,
        tx: &mut sqlx::PgConnection,
        on_conflict: &str,
    ) -> Result<HashMap<i64, String>, sqlx::Error> {
        let sql = format!("{INSERT} {on_conflict} RETURNING id, status");
        let rows: Vec<(i64, String)> = bind_columns!(sqlx::query_as(&sql), self).fetch_all(&mut *tx).await?;
        Ok(rows.into_iter().collect())
    }
}
