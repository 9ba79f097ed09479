//! The frontier of a `queue` sale: places 1..`admitted` are admitted.
//!
//! [`advance`] moves it by `admit_rate` a second since the last move (at most one
//! second's worth at once, so that a lull banks no burst), never past the last
//! place, and not while the admitted shoppers who may still order could take
//! every unit left: those whose turn (`turn_secs` from their admission) has not
//! ended and who hold no live order in Postgres. Orders still on their way to
//! Postgres count as shoppers who may still order: the rule errs on admitting
//! later, never on admitting more shoppers than units. Returned units, and turns
//! that end unused, let it move again. Every move is logged (`queue_admits`): a
//! place's turn starts at the first move that passed it.
//!
//! Any instance may advance the queue; the queue's row lock serialises them, and
//! each move counts from the last one's time, so several instances admit at the
//! one rate. The first advance after `begin_at` starts the queue's seal in the
//! background ([`super::queue::seal_in_background`]) and answers the unsealed
//! frontier: no advance waits on a seal.
mod admitted;

use super::queue::{lock, seal_in_background, Locked};
use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use utoipa::ToSchema;

pub use admitted::{recent_admitted, turn_of, Admitted, Turn};

/// How long after a turn's end its unit still counts as the turn's: the
/// admission token is valid to the second before the end by its instance's clock
/// (`SECKILL_MAX_CLOCK_SKEW_MS` bounds how far that is from Postgres's).
pub const TURN_MARGIN_SECS: i64 = 2;

/// The queue's state after an advance.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, ToSchema)]
pub struct Frontier {
    /// Places 1..=admitted are admitted.
    pub admitted: i64,
    /// Places handed out (0 before the seal, when early arrivals have none yet).
    pub places: i64,
    /// Shoppers in the queue (with a place or waiting for the seal).
    pub length: i64,
    /// Shoppers admitted a second.
    pub admit_rate: i32,
    /// Whether the early arrivals have been numbered.
    pub sealed: bool,
    /// Whether the frontier is held because the admitted shoppers who may still
    /// order could take every unit left.
    pub held: bool,
    /// Whether the sale is paused: the queue's clock stands still (the frontier
    /// does not move, and turns go on where they stopped once it resumes).
    pub paused: bool,
}

/// Moves the frontier of `voucher`'s queue as far as its rate and the stop rule
/// allow now, and returns it. `units_left` reads the sale's stock in Redis now
/// (called after the live orders are counted: see [`room`]); `turn_secs`: how
/// long a turn lasts.
pub async fn advance<F, Fut>(
    pg: &PgPool,
    voucher: i64,
    begin_at: DateTime<Utc>,
    units_left: F,
    turn_secs: i64,
) -> Result<Frontier>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<i64>>,
{
    if let Some(frontier) = unmoved(pg, voucher, begin_at).await? {
        return Ok(frontier);
    }
    let mut tx = pg.begin().await?;
    // Sealed: the row is held only briefly (advances, late joins).
    let q = lock(&mut tx, voucher).await?;
    if q.paused_at.is_some() {
        return stand_paused(tx, voucher, &q).await;
    }
    let since = q.advanced_at.unwrap_or(begin_at);
    let elapsed = (q.now - since).num_microseconds().unwrap_or(i64::MAX).max(0) as f64 / 1e6;
    let rate = f64::from(q.admit_rate);
    // At most one second's worth at once.
    let due = (q.carry + rate * elapsed).min(rate.max(1.0));
    let step = due.floor() as i64;
    let mut target = (q.admitted + step).min(q.next_place);
    let mut held = false;
    if target > q.admitted {
        let room = room(&mut tx, voucher, q.admitted, q.clock(), &units_left, turn_secs).await?;
        if q.admitted + room < target {
            target = q.admitted + room;
            held = true;
        }
    }
    // What was due and could not be admitted is not banked.
    let carry = if target == q.admitted + step {
        due - step as f64
    } else {
        0.0
    };
    record_move(&mut tx, voucher, &q, target, carry).await?;
    tx.commit().await?;
    Ok(Frontier {
        admitted: target,
        places: q.next_place,
        length: q.next_place,
        admit_rate: q.admit_rate,
        sealed: true,
        held,
        paused: false,
    })
}

/// The frontier while there is nothing to move: before the start, or before the
/// seal (which it starts once the sale has begun). None once sealed.
async fn unmoved(pg: &PgPool, voucher: i64, begin_at: DateTime<Utc>) -> Result<Option<Frontier>> {
    // Before the start, or before the seal: nothing to move, and no lock (the early
    // joins hold the row in share mode; the seal holds it exclusively).
    let before: Option<(bool, bool, i32, i64)> = sqlx::query_as(
        "SELECT clock_timestamp() < $2, q.sealed, q.admit_rate,
                (SELECT count(*) FROM queue_places p WHERE p.voucher_id = q.voucher_id)
           FROM admission_queues q WHERE q.voucher_id = $1",
    )
    .bind(voucher)
    .bind(begin_at)
    .fetch_optional(pg)
    .await?;
    if let Some((early, sealed, admit_rate, length)) = before {
        if !early && !sealed {
            seal_in_background(pg, voucher, begin_at);
        }
        if early || !sealed {
            return Ok(Some(Frontier {
                admitted: 0,
                places: 0,
                length,
                admit_rate,
                sealed: false,
                held: false,
                paused: false,
            }));
        }
    }
    Ok(None)
}

/// The frontier of a paused sale, `q` its queue's row locked in `tx`: it stands,
/// and the time paused is not due after (the move's clock starts again now).
async fn stand_paused(mut tx: Transaction<'_, Postgres>, voucher: i64, q: &Locked) -> Result<Frontier> {
    // Paused: the frontier stands, and the time paused is not due after.
    sqlx::query("UPDATE admission_queues SET advanced_at = $2 WHERE voucher_id = $1")
        .bind(voucher)
        .bind(q.now)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Frontier {
        admitted: q.admitted,
        places: q.next_place,
        length: q.next_place,
        admit_rate: q.admit_rate,
        sealed: true,
        held: false,
        paused: true,
    })
}

/// Writes a move of the frontier to `target` (`carry`: what was due and is
/// banked) at `q`'s time, and logs it in `queue_admits` if it passed any place.
async fn record_move(tx: &mut PgConnection, voucher: i64, q: &Locked, target: i64, carry: f64) -> Result<()> {
    sqlx::query("UPDATE admission_queues SET admitted = $2, carry = $3, advanced_at = $4 WHERE voucher_id = $1")
        .bind(voucher)
        .bind(target)
        .bind(carry)
        .bind(q.now)
        .execute(&mut *tx)
        .await?;
    if target > q.admitted {
        sqlx::query("INSERT INTO queue_admits (voucher_id, upto, at, clock) VALUES ($1, $2, $3, $4)")
            .bind(voucher)
            .bind(target)
            .bind(q.now)
            .bind(q.clock())
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}

/// How many more shoppers may be admitted: the units left less the admitted
/// shoppers who may still order (turn not ended, no live order in Postgres).
/// `clock`: the queue's clock now. The stock is read from Redis after the live
/// orders are counted: an order Postgres holds took its unit in Redis before,
/// so the reading after has it, and no order counts both as a unit still on
/// sale and as a shopper done ordering (which would admit one shopper too many).
async fn room<F, Fut>(
    tx: &mut PgConnection,
    voucher: i64,
    admitted: i64,
    clock: f64,
    units_left: &F,
    turn_secs: i64,
) -> Result<i64>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<i64>>,
{
    // Places whose turn has ended: those the frontier had passed a turn ago by
    // the queue's clock (and a margin more: a token is good to the second it
    // names, and the instance that checks it has a clock of its own).
    let ended: i64 = sqlx::query_scalar(
        "SELECT coalesce(max(upto), 0) FROM queue_admits
          WHERE voucher_id = $1 AND coalesce(clock, extract(epoch FROM at)::float8) <= $2 - $3",
    )
    .bind(voucher)
    .bind(clock)
    .bind((turn_secs + TURN_MARGIN_SECS) as f64)
    .fetch_one(&mut *tx)
    .await?;
    let open = admitted - ended;
    let before = units_left().await?;
    if open < before {
        // Even if none of them has ordered (an order placed since this reading
        // took a unit and its shopper is among `open`: counted once).
        return Ok(before - open);
    }
    let ordered: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM queue_places q
          WHERE q.voucher_id = $1 AND q.place > $2 AND q.place <= $3
            AND {LIVE_ORDER}",
        LIVE_ORDER = crate::ordering::stored::LIVE_ORDER_OF_PLACE
    ))
    .bind(voucher)
    .bind(ended)
    .bind(admitted)
    .fetch_one(&mut *tx)
    .await?;
    let after = units_left().await?;
    Ok((after - (open - ordered)).max(0))
}

/// Sets the admit rate from now on: the frontier first moves at the old rate up
/// to now (by the caller's [`advance`]), then the new rate counts.
pub async fn set_rate(pg: &PgPool, voucher: i64, rate: i32) -> Result<bool> {
    let done = sqlx::query("UPDATE admission_queues SET admit_rate = $2 WHERE voucher_id = $1")
        .bind(voucher)
        .bind(rate)
        .execute(pg)
        .await?
        .rows_affected();
    Ok(done == 1)
}
