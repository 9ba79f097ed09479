//! The seal of a `queue` sale's waiting room: once the sale has begun, the early
//! arrivals are numbered 1..k by their draws, in a task of its own
//! ([`seal_in_background`]) that no request waits for.
use anyhow::Result;
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use std::collections::HashSet;
use std::sync::{LazyLock, Mutex};

/// The queues this process is sealing now.
static SEALING: LazyLock<Mutex<HashSet<i64>>> = LazyLock::new(Default::default);

/// Takes `voucher` out of [`SEALING`] when its seal task ends, however it ends.
struct Sealed(i64);

impl Drop for Sealed {
    fn drop(&mut self) {
        SEALING.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.0);
    }
}

/// Seals `voucher`'s queue in a task of its own, unless this process is at it
/// already: no request waits for it.
pub fn seal_in_background(pg: &PgPool, voucher: i64, begin_at: DateTime<Utc>) {
    if !SEALING.lock().unwrap_or_else(|e| e.into_inner()).insert(voucher) {
        return;
    }
    let pg = pg.clone();
    tokio::spawn(async move {
        let _done = Sealed(voucher);
        if let Err(e) = seal_now(&pg, voucher, begin_at).await {
            tracing::warn!(voucher_id = voucher, error = ?e, "queue not sealed; the next advance tries again");
        }
    });
}

/// Seals the queue if the sale has begun and nobody has, or is (the row taken
/// without waiting: an instance sealing holds it, and so, briefly, does an early
/// join): true if this call sealed it.
pub async fn seal_now(pg: &PgPool, voucher: i64, begin_at: DateTime<Utc>) -> Result<bool> {
    let mut tx = pg.begin().await?;
    let unsealed: Option<bool> = sqlx::query_scalar(
        "SELECT NOT sealed FROM admission_queues
          WHERE voucher_id = $1 AND clock_timestamp() >= $2 FOR UPDATE SKIP LOCKED",
    )
    .bind(voucher)
    .bind(begin_at)
    .fetch_optional(&mut *tx)
    .await?;
    if unsealed != Some(true) {
        return Ok(false);
    }
    let early = seal(&mut tx, voucher, begin_at).await?;
    tx.commit().await?;
    tracing::info!(voucher_id = voucher, early, "queue sealed");
    Ok(true)
}

/// Numbers the early arrivals by their draws (the queue's row locked, the sale
/// begun). The frontier's clock starts at `begin_at`.
async fn seal(tx: &mut PgConnection, voucher: i64, begin_at: DateTime<Utc>) -> Result<i64> {
    // One statement over every early arrival: a large crowd must not be cut short
    // by the statement timeout and retried forever.
    sqlx::query("SET LOCAL statement_timeout = 0").execute(&mut *tx).await?;
    let early = sqlx::query(
        "UPDATE queue_places q SET place = r.rn
           FROM (SELECT user_id, row_number() OVER (ORDER BY draw, user_id) AS rn
                   FROM queue_places WHERE voucher_id = $1) r
          WHERE q.voucher_id = $1 AND q.user_id = r.user_id",
    )
    .bind(voucher)
    .execute(&mut *tx)
    .await?
    .rows_affected() as i64;
    sqlx::query(
        "UPDATE admission_queues SET sealed = true, next_place = $2, advanced_at = $3, carry = 0
          WHERE voucher_id = $1",
    )
    .bind(voucher)
    .bind(early)
    .bind(begin_at)
    .execute(&mut *tx)
    .await?;
    Ok(early)
}
