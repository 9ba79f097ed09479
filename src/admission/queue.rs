//! The waiting room of a `queue` sale, in Postgres.
//!
//! **Places.** A shopper who joins before `begin_at` (Postgres's clock) gets a
//! random `draw` and no place yet; the seal, in the background once the sale has
//! begun ([`seal_in_background`], started by the first advance that finds the
//! queue unsealed), numbers those early arrivals 1..k by their draws. A later
//! shopper gets the next place at once; until the seal is done, 503 (try again).
//! A shopper has one row: joining again answers the same place. Early joins hold
//! the queue's row in share mode (without waiting) while they check that the
//! queue is unsealed and the sale not yet begun, and the seal holds it
//! exclusively: no early arrival can slip in after the numbering, and none is
//! left unnumbered. No request waits on the seal: late joins and advances read
//! `sealed` without a lock first, and take the row only once it is sealed.
//!
//! **The frontier** that admits places is in [`super::advance`].
mod seal;

use super::addresses::{claim, Cap};
use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool, Row};

pub use seal::{seal_in_background, seal_now};

/// A shopper's place, as joining found or made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Joined {
    /// None for an early arrival before the seal.
    pub place: Option<i64>,
    /// Whether this call made the place (false: the shopper already had one).
    pub new: bool,
}

/// Creates the queue of a new sale (in the sale's transaction). A sale begun
/// already has no early arrivals to number: its queue starts sealed.
pub async fn create(
    tx: &mut PgConnection,
    voucher: i64,
    admit_rate: i32,
    begin_at: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO admission_queues (voucher_id, admit_rate, sealed, advanced_at)
         SELECT $1, $2, begun, CASE WHEN begun THEN $3 END
           FROM (SELECT clock_timestamp() >= $3 AS begun) t",
    )
    .bind(voucher)
    .bind(admit_rate)
    .bind(begin_at)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Why a join made no place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotJoined {
    /// A late join while the early arrivals are being numbered: try again shortly.
    Sealing,
    /// The client's address has the sale's `address_cap` of places.
    AddressCap,
}

/// Joins `user` to the queue of `voucher` (a queue sale beginning at `begin_at`;
/// `cap`: the client's address and the sale's cap on it, if any).
pub async fn join(
    pg: &PgPool,
    voucher: i64,
    user: i64,
    begin_at: DateTime<Utc>,
    cap: Option<&Cap>,
) -> Result<std::result::Result<Joined, NotJoined>> {
    // Joined already, with a place: nothing to lock.
    if let Some(place) = place_of(pg, voucher, user).await? {
        if place.is_some() {
            return Ok(Ok(Joined { place, new: false }));
        }
    }
    if let Some(joined) = join_early(pg, voucher, user, begin_at, cap).await? {
        return Ok(joined);
    }
    join_late(pg, voucher, user, begin_at, cap).await
}

/// An early arrival's join, under the queue row's share lock: a place without a
/// number yet (or the answer that the address cap is reached). None when the
/// join turns out late.
async fn join_early(
    pg: &PgPool,
    voucher: i64,
    user: i64,
    begin_at: DateTime<Utc>,
    cap: Option<&Cap>,
) -> Result<Option<std::result::Result<Joined, NotJoined>>> {
    // Early, by a look without a lock: then again under the share lock, while
    // unsealed and before the start. A late join takes no share lock (a stream of
    // them would keep the seal and the advances, which wait for it, waiting).
    let early = |row: &sqlx::postgres::PgRow| !row.get::<bool, _>("sealed") && row.get::<bool, _>("early");
    const LOOK: &str = "SELECT sealed, clock_timestamp() < $2 AS early FROM admission_queues WHERE voucher_id = $1";
    let look = sqlx::query(LOOK)
        .bind(voucher)
        .bind(begin_at)
        .fetch_optional(pg)
        .await?
        .context("a queue sale without its queue row")?;
    if early(&look) {
        let mut tx = pg.begin().await?;
        // Without waiting: only the seal holds the row exclusively for long, and it
        // runs after the start, when this join is late.
        let row = match sqlx::query(&format!("{LOOK} FOR SHARE NOWAIT"))
            .bind(voucher)
            .bind(begin_at)
            .fetch_optional(&mut *tx)
            .await
        {
            Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("55P03") => None,
            row => Some(row?.context("a queue sale without its queue row")?),
        };
        if row.as_ref().is_some_and(early) {
            let draw = rand::random::<i64>() & i64::MAX;
            let made = sqlx::query(
                "INSERT INTO queue_places (voucher_id, user_id, draw) VALUES ($1, $2, $3)
                 ON CONFLICT (voucher_id, user_id) DO NOTHING",
            )
            .bind(voucher)
            .bind(user)
            .bind(draw)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if made == 1 {
                if let Some(cap) = cap {
                    if !claim(&mut tx, voucher, cap).await? {
                        tx.rollback().await?;
                        return Ok(Some(Err(NotJoined::AddressCap)));
                    }
                }
            }
            tx.commit().await?;
            return Ok(Some(Ok(Joined {
                place: None,
                new: made == 1,
            })));
        }
        // Late after all: let the share lock go before asking for the exclusive
        // one (two joiners upgrading at once would deadlock).
        tx.rollback().await?;
    }
    Ok(None)
}

/// A late arrival's join: the next place, taken with the queue's row held
/// exclusively once it is sealed; while it is not, the seal is started and the
/// shopper told to try again.
async fn join_late(
    pg: &PgPool,
    voucher: i64,
    user: i64,
    begin_at: DateTime<Utc>,
    cap: Option<&Cap>,
) -> Result<std::result::Result<Joined, NotJoined>> {
    // Late: once sealed, exclusively (the row is then held only briefly, by
    // advances and other late joins). Unsealed: the seal runs; no waiting on it.
    let sealed: bool = sqlx::query_scalar("SELECT sealed FROM admission_queues WHERE voucher_id = $1")
        .bind(voucher)
        .fetch_optional(pg)
        .await?
        .context("a queue sale without its queue row")?;
    if !sealed {
        seal_in_background(pg, voucher, begin_at);
        return Ok(Err(NotJoined::Sealing));
    }
    let mut tx = pg.begin().await?;
    lock(&mut tx, voucher).await?;
    let existing: Option<Option<i64>> =
        sqlx::query_scalar("SELECT place FROM queue_places WHERE voucher_id = $1 AND user_id = $2")
            .bind(voucher)
            .bind(user)
            .fetch_optional(&mut *tx)
            .await?;
    if let Some(place) = existing {
        tx.commit().await?;
        return Ok(Ok(Joined { place, new: false }));
    }
    if let Some(cap) = cap {
        if !claim(&mut tx, voucher, cap).await? {
            tx.rollback().await?;
            return Ok(Err(NotJoined::AddressCap));
        }
    }
    let place: i64 = sqlx::query_scalar(
        "UPDATE admission_queues SET next_place = next_place + 1 WHERE voucher_id = $1 RETURNING next_place",
    )
    .bind(voucher)
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query("INSERT INTO queue_places (voucher_id, user_id, draw, place) VALUES ($1, $2, 0, $3)")
        .bind(voucher)
        .bind(user)
        .bind(place)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Ok(Joined {
        place: Some(place),
        new: true,
    }))
}

/// `user`'s place: None if not in the queue, Some(None) if early and not yet numbered.
pub async fn place_of(pg: &PgPool, voucher: i64, user: i64) -> Result<Option<Option<i64>>> {
    Ok(
        sqlx::query_scalar("SELECT place FROM queue_places WHERE voucher_id = $1 AND user_id = $2")
            .bind(voucher)
            .bind(user)
            .fetch_optional(pg)
            .await?,
    )
}

/// The queue's row, locked `FOR UPDATE`, and Postgres's clock.
pub(super) struct Locked {
    pub(super) admit_rate: i32,
    pub(super) admitted: i64,
    pub(super) next_place: i64,
    pub(super) carry: f64,
    pub(super) advanced_at: Option<DateTime<Utc>>,
    pub(super) now: DateTime<Utc>,
    /// The sale's pause going on, if any: the queue's clock stands still.
    pub(super) paused_at: Option<DateTime<Utc>>,
    /// The pauses that ended, in total.
    pub(super) paused_secs: f64,
}

impl Locked {
    /// The queue's clock at `now` (see [`clock_at`]).
    pub(super) fn clock(&self) -> f64 {
        clock_at(self.now, self.paused_secs, self.paused_at)
    }
}

/// A queue's clock at `t`: unix seconds less the time its sale was paused (the
/// pauses that ended, `paused_secs`, and the one going on since `paused_at`).
/// Turns and the frontier count this time (`migrations/0025_queue_clock.sql`).
pub fn clock_at(t: DateTime<Utc>, paused_secs: f64, paused_at: Option<DateTime<Utc>>) -> f64 {
    let secs = |d: chrono::TimeDelta| d.num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6;
    let unix = t.timestamp_micros() as f64 / 1e6;
    unix - paused_secs - paused_at.map_or(0.0, |p| secs(t - p).max(0.0))
}

pub(super) async fn lock(tx: &mut PgConnection, voucher: i64) -> Result<Locked> {
    let r = sqlx::query(
        "SELECT admit_rate, admitted, next_place, carry, advanced_at, clock_timestamp() AS now,
                paused_at, paused_secs
           FROM admission_queues WHERE voucher_id = $1 FOR UPDATE",
    )
    .bind(voucher)
    .fetch_optional(&mut *tx)
    .await?
    .context("a queue sale without its queue row")?;
    Ok(Locked {
        admit_rate: r.get("admit_rate"),
        admitted: r.get("admitted"),
        next_place: r.get("next_place"),
        carry: r.get("carry"),
        advanced_at: r.get("advanced_at"),
        now: r.get("now"),
        paused_at: r.get("paused_at"),
        paused_secs: r.get("paused_secs"),
    })
}
