//! The raffle of a `raffle` sale, in Postgres: its creation, entries and what
//! anyone may read of it ([`view`]). The close and the draw run in the background
//! ([`super::draw`]); nothing here waits on them.
//!
//! **Commitment.** At the sale's creation a 32-byte random seed is drawn; its
//! SHA-256 (`commitment`) is public from then on, and so is the beacon round the
//! draw will use ([`super::beacon`]), published after `draw_at`.
//!
//! **Entries.** Until `draw_at` (Postgres's clock) a shopper may enter once. The
//! API shows an entry as `hex(HMAC-SHA256(key, "<voucher id>:<user id>"))`
//! ([`entry_of`], the key the service's own): a shopper finds their own in
//! `raffle/me`, and nobody can tell whose the others are. Entering holds the
//! raffle's row in share mode (without waiting) while it checks the clock, and
//! the close holds it exclusively: no entry can land after the close read them.
//!
//! **Close and draw** ([`super::draw`]): after `draw_at` the entry list, its hash
//! and the number of winners are fixed; once the beacon round's signature is in
//! (anyone may submit it), the winners follow by [`super::rule::RULE`]. Knowing
//! the seed, or the raffle key, tells nobody who wins: the beacon's randomness is
//! part of every score and is published after the entries closed.
mod view;

use super::addresses::{claim, Cap};
use super::beacon::Beacon;
use super::rule::entry_of;
use super::signing::sha256_hex;
use anyhow::Result;
use sqlx::{PgConnection, PgPool};

pub use view::{entries, mine, summary, winners_of, PublicEntry, Summary, Winner, SUMMARY_REFRESH};

/// Creates the raffle of a new sale (in its transaction): its secret seed, the
/// commitment to it and the beacon round it will draw with.
pub async fn create(tx: &mut PgConnection, voucher: i64, beacon: &Beacon) -> Result<String, sqlx::Error> {
    let seed: [u8; 32] = rand::random();
    let commitment = sha256_hex(&seed);
    sqlx::query(
        "INSERT INTO raffles (voucher_id, seed, commitment, beacon_key, beacon_genesis, beacon_period, beacon_round)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(voucher)
    .bind(seed.as_slice())
    .bind(&commitment)
    .bind(&beacon.chain.public_key)
    .bind(beacon.chain.genesis_time)
    .bind(beacon.chain.period)
    .bind(beacon.round)
    .execute(&mut *tx)
    .await?;
    Ok(commitment)
}

/// What entering did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entered {
    /// A new entry.
    New(String),
    /// The shopper had entered already.
    Already(String),
    /// Past `draw_at`: entries are closed (and the shopper had none).
    Closed,
    /// The client's address has the sale's `address_cap` of entries.
    AddressCap,
}

/// Enters `user` in `voucher`'s raffle (`key`: the service's raffle key; `cap`:
/// the client's address and the sale's cap on it, if any).
pub async fn enter(pg: &PgPool, key: &[u8], voucher: i64, user: i64, cap: Option<&Cap>) -> Result<Entered> {
    let entry = entry_of(key, voucher, user);
    // Once more if the first try met a concurrent entry of the same shopper as a
    // deadlock, a serialization failure or a unique violation (seen once under
    // load, cause not found): the second sees the committed entry.
    let answer = match try_enter(pg, voucher, user, &entry, cap).await {
        Err(e) if retryable(&e) => try_enter(pg, voucher, user, &entry, cap).await,
        answer => answer,
    };
    Ok(answer?)
}

fn retryable(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if matches!(db.code().as_deref(), Some("40P01" | "40001" | "23505")))
}

async fn try_enter(
    pg: &PgPool,
    voucher: i64,
    user: i64,
    entry: &str,
    cap: Option<&Cap>,
) -> Result<Entered, sqlx::Error> {
    let entry = entry.to_owned();
    // Without a lock first: entered already, or closed by Postgres's clock, takes
    // no share lock (a stream of them would keep the close from the row).
    let open_now: Option<bool> = sqlx::query_scalar(&format!(
        "SELECT r.closed_at IS NULL AND r.drawn_at IS NULL AND clock_timestamp() < s.draw_at
           FROM raffles r {SALE} WHERE r.voucher_id = $1",
        SALE = crate::sales::sql::JOIN_SALE_OF_RAFFLE
    ))
    .bind(voucher)
    .fetch_optional(pg)
    .await?;
    if open_now != Some(true) {
        return already_or_closed(pg, voucher, user).await;
    }
    let mut tx = pg.begin().await?;
    // Without waiting: only the close and the draw hold the row exclusively, and
    // both run past draw_at, when entries are closed.
    let open: bool = match sqlx::query_scalar(&format!(
        "SELECT r.closed_at IS NULL AND r.drawn_at IS NULL AND clock_timestamp() < s.draw_at
           FROM raffles r {SALE}
          WHERE r.voucher_id = $1 FOR SHARE OF r NOWAIT",
        SALE = crate::sales::sql::JOIN_SALE_OF_RAFFLE
    ))
    .bind(voucher)
    .fetch_optional(&mut *tx)
    .await
    {
        Ok(open) => open.ok_or_else(|| sqlx::Error::Protocol("a raffle sale without its raffle row".into()))?,
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("55P03") => {
            drop(tx);
            return already_or_closed(pg, voucher, user).await;
        }
        Err(e) => return Err(e),
    };
    let had: Option<String> =
        sqlx::query_scalar("SELECT entry FROM raffle_entries WHERE voucher_id = $1 AND user_id = $2")
            .bind(voucher)
            .bind(user)
            .fetch_optional(&mut *tx)
            .await?;
    let answer = match (had, open) {
        (Some(e), _) => Entered::Already(e),
        (None, false) => Entered::Closed,
        (None, true) => insert_entry(&mut tx, voucher, user, entry, cap).await?,
    };
    if answer == Entered::AddressCap {
        tx.rollback().await?;
        return Ok(Entered::AddressCap);
    }
    tx.commit().await?;
    Ok(answer)
}

/// What a shopper who may not enter now has: their entry if they made one, or
/// else the news that entries are closed.
async fn already_or_closed(pg: &PgPool, voucher: i64, user: i64) -> Result<Entered, sqlx::Error> {
    Ok(match entry_of_user(pg, voucher, user).await? {
        Some(e) => Entered::Already(e),
        None => Entered::Closed,
    })
}

/// Inserts `user`'s entry (in `tx`, the raffle's row held in share mode and open)
/// and counts it against the address cap: AddressCap when the cap is reached
/// (the caller rolls back), Already when a concurrent entry of the shopper made it.
async fn insert_entry(
    tx: &mut PgConnection,
    voucher: i64,
    user: i64,
    entry: String,
    cap: Option<&Cap>,
) -> Result<Entered, sqlx::Error> {
    // The same shopper entering twice at once: one insert, one answer of the
    // entry. No conflict target: the entry's own unique index must not raise
    // either (a concurrent insert of the same row meets both).
    let made = sqlx::query(
        "INSERT INTO raffle_entries (voucher_id, user_id, entry) VALUES ($1, $2, $3)
         ON CONFLICT DO NOTHING",
    )
    .bind(voucher)
    .bind(user)
    .bind(&entry)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if made == 1 {
        if let Some(cap) = cap {
            if !claim(&mut *tx, voucher, cap).await? {
                return Ok(Entered::AddressCap);
            }
        }
        Ok(Entered::New(entry))
    } else {
        Ok(Entered::Already(entry))
    }
}

/// A shopper's entry, if any.
async fn entry_of_user(pg: &PgPool, voucher: i64, user: i64) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar("SELECT entry FROM raffle_entries WHERE voucher_id = $1 AND user_id = $2")
        .bind(voucher)
        .bind(user)
        .fetch_optional(pg)
        .await
}
