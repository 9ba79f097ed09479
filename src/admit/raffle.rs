//! The raffle of a `raffle` sale, in Postgres: its creation, entries and what
//! anyone may read of it. The close and the draw run in the background
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
use super::addresses::{claim, Cap};
use super::beacon::Beacon;
use super::rule::{entry_of, RULE, RULE_WITHOUT_BEACON};
use super::signing::sha256_hex;
use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgPool, Row};
use utoipa::ToSchema;

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
    let open_now: Option<bool> = sqlx::query_scalar(
        "SELECT r.closed_at IS NULL AND r.drawn_at IS NULL AND clock_timestamp() < s.draw_at
           FROM raffles r JOIN seckill_vouchers s ON s.voucher_id = r.voucher_id WHERE r.voucher_id = $1",
    )
    .bind(voucher)
    .fetch_optional(pg)
    .await?;
    if open_now != Some(true) {
        return already_or_closed(pg, voucher, user).await;
    }
    let mut tx = pg.begin().await?;
    // Without waiting: only the close and the draw hold the row exclusively, and
    // both run past draw_at, when entries are closed.
    let open: bool = match sqlx::query_scalar(
        "SELECT r.closed_at IS NULL AND r.drawn_at IS NULL AND clock_timestamp() < s.draw_at
           FROM raffles r JOIN seckill_vouchers s ON s.voucher_id = r.voucher_id
          WHERE r.voucher_id = $1 FOR SHARE OF r NOWAIT",
    )
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

/// The raffle, as anyone may see it.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Summary {
    /// `open` (entries until `draw_at`), `closing` (past `draw_at`, the list not
    /// yet fixed), `awaiting_beacon` (the list and the number of winners fixed; the
    /// beacon round's signature not yet submitted: anyone may, at `POST
    /// .../raffle/beacon`), `drawing`, `drawn`.
    pub status: &'static str,
    /// hex SHA-256 of the seed, public from the sale's creation.
    pub commitment: String,
    pub draw_at: DateTime<Utc>,
    /// The seed in lower-case hex, once drawn (null before).
    pub seed: Option<String>,
    /// When the entries were closed and the list below fixed (null before).
    pub closed_at: Option<DateTime<Utc>>,
    pub drawn_at: Option<DateTime<Utc>>,
    /// Entries so far; from the close, the entries of the list.
    pub entries: i64,
    /// The hash of the entry list, fixed at the close (null before).
    pub list_hash: Option<String>,
    /// How many win: min(the sale's total stock at `draw_at`, entries), fixed at
    /// the close (null before).
    pub winners: Option<i32>,
    /// The beacon round the draw uses, named at the sale's creation (null for a
    /// raffle drawn before beacons, by the seed alone).
    pub beacon: Option<Beacon>,
    /// Whether `beacon` is the League of Entropy's quicknet chain.
    pub beacon_is_quicknet: Option<bool>,
    /// The round named at the sale's creation, if the close had to move it to
    /// `beacon.round` (it ran when that round was about to be published; null
    /// otherwise).
    pub beacon_named_round: Option<i64>,
    /// The round's signature and its randomness (hex), once submitted and verified.
    pub signature: Option<String>,
    pub randomness: Option<String>,
    /// How to recompute the winners.
    pub rule: &'static str,
}

/// How old a raffle's summary may be when `GET .../raffle` answers with it: a
/// crowd reading the raffle costs Postgres a query (and a count of the entries,
/// until the close) per sale and instance this often, not per request.
pub const SUMMARY_REFRESH: std::time::Duration = std::time::Duration::from_millis(500);

/// The raffle's public state. Reads only: the close and the draw happen in the
/// background ([`super::draw`]).
pub async fn summary(pg: &PgPool, voucher: i64) -> Result<Summary> {
    let r = sqlx::query(
        "SELECT r.commitment, s.draw_at, CASE WHEN r.drawn_at IS NOT NULL THEN r.seed END AS seed, r.drawn_at,
                r.closed_at, r.winners, r.list_hash, clock_timestamp() >= s.draw_at AS due,
                coalesce(r.entries::bigint,
                         (SELECT count(*) FROM raffle_entries e WHERE e.voucher_id = r.voucher_id)) AS entries,
                r.beacon_key, r.beacon_genesis, r.beacon_period, r.beacon_round, r.beacon_named_round,
                b.signature, b.randomness
           FROM raffles r JOIN seckill_vouchers s ON s.voucher_id = r.voucher_id
           LEFT JOIN raffle_beacons b ON b.voucher_id = r.voucher_id AND b.round = r.beacon_round
          WHERE r.voucher_id = $1",
    )
    .bind(voucher)
    .fetch_optional(pg)
    .await?
    .context("a raffle sale without its raffle row")?;
    let beacon = match super::beacon::of_row(&r)? {
        (Some(chain), Some(round)) => Some(Beacon::new(chain, round)),
        _ => None,
    };
    let drawn_at: Option<DateTime<Utc>> = r.try_get("drawn_at")?;
    let closed_at: Option<DateTime<Utc>> = r.try_get("closed_at")?;
    let signature: Option<String> = r.try_get("signature")?;
    let status = match (drawn_at, closed_at, &signature) {
        (Some(_), _, _) => "drawn",
        (None, Some(_), Some(_)) => "drawing",
        (None, Some(_), None) => "awaiting_beacon",
        (None, None, _) if r.try_get::<bool, _>("due")? => "closing",
        (None, None, _) => "open",
    };
    Ok(Summary {
        status,
        commitment: r.try_get("commitment")?,
        draw_at: r.try_get("draw_at")?,
        seed: r.try_get::<Option<Vec<u8>>, _>("seed")?.map(hex::encode),
        closed_at,
        drawn_at,
        entries: r.try_get("entries")?,
        list_hash: r.try_get("list_hash")?,
        winners: r.try_get("winners")?,
        beacon_is_quicknet: beacon.as_ref().map(|b| b.chain.is_quicknet()),
        beacon_named_round: r.try_get("beacon_named_round")?,
        rule: if beacon.is_some() { RULE } else { RULE_WITHOUT_BEACON },
        beacon,
        signature,
        randomness: r.try_get("randomness")?,
    })
}

/// A shopper's entry, if any.
async fn entry_of_user(pg: &PgPool, voucher: i64, user: i64) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar("SELECT entry FROM raffle_entries WHERE voucher_id = $1 AND user_id = $2")
        .bind(voucher)
        .bind(user)
        .fetch_optional(pg)
        .await
}

/// A shopper's entry: (entry, won: None before the draw).
pub async fn mine(pg: &PgPool, voucher: i64, user: i64) -> Result<Option<(String, Option<bool>)>> {
    Ok(sqlx::query_as(
        "SELECT e.entry, CASE WHEN r.drawn_at IS NULL THEN NULL ELSE coalesce(e.won, false) END AS won
               FROM raffle_entries e JOIN raffles r ON r.voucher_id = e.voucher_id
              WHERE e.voucher_id = $1 AND e.user_id = $2",
    )
    .bind(voucher)
    .bind(user)
    .fetch_optional(pg)
    .await?)
}

/// One entry of the published list.
#[derive(Clone, Debug, Serialize, ToSchema, sqlx::FromRow)]
pub struct PublicEntry {
    pub entry: String,
    /// Null before the draw.
    pub won: Option<bool>,
}

/// A page of the entries, in entry order: those after `after`, at most `limit`;
/// only the winners if `won_only`.
pub async fn entries(
    pg: &PgPool,
    voucher: i64,
    after: Option<&str>,
    limit: i64,
    won_only: bool,
) -> Result<Vec<PublicEntry>> {
    Ok(sqlx::query_as(
        "SELECT e.entry, CASE WHEN r.drawn_at IS NULL THEN NULL ELSE coalesce(e.won, false) END AS won
           FROM raffle_entries e JOIN raffles r ON r.voucher_id = e.voucher_id
          WHERE e.voucher_id = $1 AND ($2::text IS NULL OR e.entry > $2) AND (NOT $3 OR e.won)
          ORDER BY e.entry LIMIT $4",
    )
    .bind(voucher)
    .bind(after)
    .bind(won_only)
    .bind(limit)
    .fetch_all(pg)
    .await?)
}

/// One winner, for the admin.
#[derive(Clone, Debug, Serialize, ToSchema, sqlx::FromRow)]
pub struct Winner {
    #[serde(with = "crate::id")]
    #[schema(schema_with = crate::id::schema)]
    pub user_id: i64,
    pub entry: String,
}

/// The first `limit` winners in entry order, with their shoppers.
pub async fn winners_of(pg: &PgPool, voucher: i64, limit: i64) -> Result<Vec<Winner>> {
    Ok(sqlx::query_as(
        "SELECT user_id, entry FROM raffle_entries WHERE voucher_id = $1 AND won ORDER BY entry LIMIT $2",
    )
    .bind(voucher)
    .bind(limit)
    .fetch_all(pg)
    .await?)
}
