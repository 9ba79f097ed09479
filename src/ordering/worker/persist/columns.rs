//! Column arrays for one `INSERT ... SELECT FROM UNNEST(...)` of orders, or one
//! binary `COPY` of them.
use crate::id::OrderKey;
use crate::ordering::OrderMsg;
use chrono::{DateTime, Utc};
use std::collections::HashMap;

const UNIQUE_VIOLATION: &str = "23505";

/// The rows of [`Columns`], one parameter per column.
const INSERT: &str = "INSERT INTO voucher_orders (id, user_id, voucher_id, created_at, status, order_no, failure, issued_id)
     SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::bigint[], $4::timestamptz[], $5::text[], $6::text[], $7::text[], $8::bigint[])";

/// The same columns as [`INSERT`], as one `COPY` in Postgres's binary format:
/// the common case (no row stored yet), where no row is to be skipped.
const COPY: &str = "COPY voucher_orders (id, user_id, voucher_id, created_at, status, order_no, failure, issued_id)
     FROM STDIN (FORMAT binary)";

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
        self.push_as(o, o.id.get(), failure, order_no);
        self.issued.pop();
        self.issued.push(None);
    }

    /// The order under the id `id` (a fresh one when its own was taken).
    pub fn push_as(&mut self, o: &OrderMsg, id: i64, failure: Option<String>, order_no: Option<String>) {
        self.original.push(o.id.get());
        self.issued.push(Some(o.id.get()));
        self.id.push(id);
        self.user.push(o.user_id.get());
        self.voucher.push(o.voucher_id.get());
        self.created_at
            .push(DateTime::from_timestamp_millis(o.created_ms).unwrap_or_else(Utc::now));
        self.status
            .push(if failure.is_some() { "failed" } else { "created" }.to_owned());
        self.order_no.push(order_no);
        self.failure.push(failure);
    }

    /// Inserts the rows no constraint refuses; returns the [`OrderKey`] (with the
    /// id the order was admitted with) -> status of those inserted.
    pub async fn insert(&self, conn: &mut sqlx::PgConnection) -> Result<HashMap<OrderKey, String>, sqlx::Error> {
        self.insert_with(conn, "ON CONFLICT DO NOTHING").await
    }

    /// [`Columns::insert`] within a transaction (it takes a savepoint).
    ///
    /// First as they are, all or none, by `COPY`: in the common case (no row is
    /// stored yet, no shopper has a live order) that costs Postgres about a
    /// quarter less than `ON CONFLICT DO NOTHING`, which probes every unique index
    /// before each row, and `COPY` writes a page of table rows with one WAL record
    /// where `INSERT` writes one per row (index entries are one record each either
    /// way). If a row conflicts (a redelivered batch, an incident), that attempt is
    /// rolled back to its savepoint and the rows no constraint refuses are
    /// inserted, the others skipped for the caller to settle. Returns `None` when
    /// the `COPY` stored every row with the status it was given, else what the
    /// tolerant insert reports (key -> status of the rows it inserted).
    ///
    /// Must run to its end (see [`super::persist`]).
    pub async fn insert_in_tx(
        &self,
        tx: &mut sqlx::PgConnection,
    ) -> Result<Option<HashMap<OrderKey, String>>, sqlx::Error> {
        sqlx::query("SAVEPOINT fresh_orders").execute(&mut *tx).await?;
        let copied = async {
            let mut copy = tx.copy_in_raw(COPY).await?;
            copy.send(self.binary()).await?;
            copy.finish().await
        };
        match copied.await {
            Ok(n) if n == self.id.len() as u64 => {
                sqlx::query("RELEASE SAVEPOINT fresh_orders").execute(&mut *tx).await?;
                Ok(None)
            }
            // Fewer rows than given without an error (never expected: nothing on
            // the table drops a row) is settled as a conflict is, from what the
            // tolerant insert reports.
            Ok(_) => Ok(Some(self.insert_again(tx).await?)),
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(UNIQUE_VIOLATION) => {
                Ok(Some(self.insert_again(tx).await?))
            }
            Err(e) => Err(e),
        }
    }

    /// Order key (admitted id, shopper, voucher) -> business number, of the rows
    /// given one.
    pub fn numbered(&self) -> HashMap<OrderKey, String> {
        (0..self.original.len())
            .filter_map(|i| {
                let n = self.order_no[i].clone()?;
                Some((OrderKey::of(self.original[i], self.user[i], self.voucher[i]), n))
            })
            .collect()
    }

    /// The rows in `COPY`'s binary format: a header, then each row as its field
    /// count and each field's length (-1 for NULL) and bytes, big-endian; then -1.
    fn binary(&self) -> Vec<u8> {
        /// 2000-01-01T00:00:00Z, Postgres's epoch for timestamps, in Unix microseconds.
        const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;
        fn int8(out: &mut Vec<u8>, v: Option<i64>) {
            match v {
                Some(v) => {
                    out.extend_from_slice(&8i32.to_be_bytes());
                    out.extend_from_slice(&v.to_be_bytes());
                }
                None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        fn text(out: &mut Vec<u8>, v: Option<&str>) {
            match v {
                Some(v) => {
                    out.extend_from_slice(&(v.len() as i32).to_be_bytes());
                    out.extend_from_slice(v.as_bytes());
                }
                None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        let mut out = Vec::with_capacity(19 + self.id.len() * 120 + 2);
        out.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
        out.extend_from_slice(&0i32.to_be_bytes()); // flags
        out.extend_from_slice(&0i32.to_be_bytes()); // header extension
        for i in 0..self.id.len() {
            out.extend_from_slice(&8i16.to_be_bytes());
            int8(&mut out, Some(self.id[i]));
            int8(&mut out, Some(self.user[i]));
            int8(&mut out, Some(self.voucher[i]));
            int8(&mut out, Some(self.created_at[i].timestamp_micros() - PG_EPOCH_MICROS));
            text(&mut out, Some(&self.status[i]));
            text(&mut out, self.order_no[i].as_deref());
            text(&mut out, self.failure[i].as_deref());
            int8(&mut out, self.issued[i]);
        }
        out.extend_from_slice(&(-1i16).to_be_bytes());
        out
    }

    /// Back to the savepoint, then the rows no constraint refuses.
    async fn insert_again(&self, tx: &mut sqlx::PgConnection) -> Result<HashMap<OrderKey, String>, sqlx::Error> {
        sqlx::query("ROLLBACK TO SAVEPOINT fresh_orders")
            .execute(&mut *tx)
            .await?;
        self.insert_with(tx, "ON CONFLICT DO NOTHING").await
    }

    async fn insert_with(
        &self,
        tx: &mut sqlx::PgConnection,
        on_conflict: &str,
    ) -> Result<HashMap<OrderKey, String>, sqlx::Error> {
        let sql = format!("{INSERT} {on_conflict} RETURNING coalesce(issued_id, id), user_id, voucher_id, status");
        let rows: Vec<(i64, i64, i64, String)> = bind_columns!(sqlx::query_as(&sql), self).fetch_all(&mut *tx).await?;
        Ok(rows
            .into_iter()
            .map(|(id, u, v, s)| (OrderKey::of(id, u, v), s))
            .collect())
    }
}
