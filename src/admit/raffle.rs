//! The raffle of a `raffle` sale, in Postgres, and its published rule.
//!
//! **Commitment.** At the sale's creation a 32-byte random seed is drawn and kept
//! secret; its SHA-256 (`commitment`) is public from then on, before any entry.
//!
//! **Entries.** Until `draw_at` (Postgres's clock) a shopper may enter once. The
//! API shows an entry as `hex(HMAC-SHA256(key, "<voucher id>:<user id>"))`
//! ([`entry_of`], the key the service's own): a shopper finds their own in
//! `raffle/me`, and nobody can tell whose the others are. Entering holds the
//! raffle's row in share mode while it checks the clock, and the draw holds it
//! exclusively: no entry can land after the draw read them.
//!
//! **The draw**, the first time anyone asks after `draw_at`: it reveals the
//! seed and the hash of the final entry list ([`super::rule::list_hash`]); each entry's score
//! is `hex(SHA-256(seed_hex + ":" + list_hash + ":" + entry))` ([`super::rule::score_of`]);
//! the entries sorted by score (then by entry) win in that order, as many as the
//! sale's stock ([`winners`]). The list's hash in every score means that even
//! whoever knew the seed early could not tell whether an entry wins before the
//! list is closed. Anyone can check that SHA-256 of the seed is the commitment and
//! recompute the winners from the seed and the published entries. The draw is
//! one transaction, with no statement timeout (a large raffle must not be cut
//! short and retried forever): a crash during it leaves no trace, and drawing
//! again draws the same winners.
use super::rule::{entry_of, winners, RULE};
use super::signing::sha256_hex;
use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgPool, Row};
use utoipa::ToSchema;

/// Creates the raffle of a new sale (in its transaction): its secret seed and the
/// commitment to it.
pub async fn create(tx: &mut PgConnection, voucher: i64) -> Result<String, sqlx::Error> {
    let seed: [u8; 32] = rand::random();
    let commitment = sha256_hex(&seed);
    sqlx::query("INSERT INTO raffles (voucher_id, seed, commitment) VALUES ($1, $2, $3)")
        .bind(voucher)
        .bind(seed.as_slice())
        .bind(&commitment)
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
}

/// Enters `user` in `voucher`'s raffle (`key`: the service's raffle key).
pub async fn enter(pg: &PgPool, key: &[u8], voucher: i64, user: i64) -> Result<Entered> {
    let entry = entry_of(key, voucher, user);
    // Once more if the first try met a concurrent entry of the same shopper as a
    // deadlock, a serialization failure or a unique violation (seen once under
    // load, cause not found): the second sees the committed entry.
    let answer = match try_enter(pg, voucher, user, &entry).await {
        Err(e) if retryable(&e) => try_enter(pg, voucher, user, &entry).await,
        answer => answer,
    };
    Ok(answer?)
}

fn retryable(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if matches!(db.code().as_deref(), Some("40P01" | "40001" | "23505")))
}

async fn try_enter(pg: &PgPool, voucher: i64, user: i64, entry: &str) -> Result<Entered, sqlx::Error> {
    let entry = entry.to_owned();
    let mut tx = pg.begin().await?;
    let open: bool = sqlx::query_scalar(
        "SELECT r.drawn_at IS NULL AND clock_timestamp() < s.draw_at
           FROM raffles r JOIN seckill_vouchers s ON s.voucher_id = r.voucher_id
          WHERE r.voucher_id = $1 FOR SHARE OF r",
    )
    .bind(voucher)
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| sqlx::Error::Protocol("a raffle sale without its raffle row".into()))?;
    let had: Option<String> =
        sqlx::query_scalar("SELECT entry FROM raffle_entries WHERE voucher_id = $1 AND user_id = $2")
            .bind(voucher)
            .bind(user)
            .fetch_optional(&mut *tx)
            .await?;
    let answer = match (had, open) {
        (Some(e), _) => Entered::Already(e),
        (None, false) => Entered::Closed,
        (None, true) => {
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
                Entered::New(entry)
            } else {
                Entered::Already(entry)
            }
        }
    };
    tx.commit().await?;
    Ok(answer)
}

/// The raffle, as anyone may see it.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Summary {
    /// hex SHA-256 of the seed, public from the sale's creation.
    pub commitment: String,
    pub draw_at: DateTime<Utc>,
    /// The seed in lower-case hex, once drawn (null before).
    pub seed: Option<String>,
    pub drawn_at: Option<DateTime<Utc>>,
    pub entries: i64,
    /// The hash of the entry list the draw closed (null before the draw).
    pub list_hash: Option<String>,
    /// How many won (null before the draw).
    pub winners: Option<i32>,
    /// How to recompute the winners.
    pub rule: &'static str,
}

/// How old a raffle's summary may be when `GET .../raffle` answers with it: a
/// crowd reading the raffle costs Postgres a query (and a count of the entries)
/// per sale and instance this often, not per request.
pub const SUMMARY_REFRESH: std::time::Duration = std::time::Duration::from_millis(500);

/// The raffle's public state, drawing it first if `draw_at` has passed.
pub async fn summary(pg: &PgPool, voucher: i64) -> Result<Summary> {
    draw(pg, voucher).await?;
    let r = sqlx::query(
        "SELECT r.commitment, s.draw_at, CASE WHEN r.drawn_at IS NOT NULL THEN r.seed END AS seed, r.drawn_at,
                r.winners, r.list_hash,
                coalesce(r.entries::bigint,
                         (SELECT count(*) FROM raffle_entries e WHERE e.voucher_id = r.voucher_id)) AS entries
           FROM raffles r JOIN seckill_vouchers s ON s.voucher_id = r.voucher_id WHERE r.voucher_id = $1",
    )
    .bind(voucher)
    .fetch_optional(pg)
    .await?
    .context("a raffle sale without its raffle row")?;
    Ok(Summary {
        commitment: r.try_get("commitment")?,
        draw_at: r.try_get("draw_at")?,
        seed: r.try_get::<Option<Vec<u8>>, _>("seed")?.map(hex::encode),
        drawn_at: r.try_get("drawn_at")?,
        entries: r.try_get("entries")?,
        list_hash: r.try_get("list_hash")?,
        winners: r.try_get("winners")?,
        rule: RULE,
    })
}

/// Draws the raffle if `draw_at` has passed and nobody has: true if it is drawn
/// (now or before).
pub async fn draw(pg: &PgPool, voucher: i64) -> Result<bool> {
    // Cheap first: drawn already, or not due.
    let due: Option<(bool, bool)> = sqlx::query_as(
        "SELECT r.drawn_at IS NOT NULL, clock_timestamp() >= s.draw_at
           FROM raffles r JOIN seckill_vouchers s ON s.voucher_id = r.voucher_id WHERE r.voucher_id = $1",
    )
    .bind(voucher)
    .fetch_optional(pg)
    .await?;
    match due {
        None => anyhow::bail!("a raffle sale without its raffle row"),
        Some((true, _)) => return Ok(true),
        Some((false, false)) => return Ok(false),
        Some((false, true)) => {}
    }
    let mut tx = pg.begin().await?;
    sqlx::query("SET LOCAL statement_timeout = 0").execute(&mut *tx).await?;
    let r = sqlx::query(
        "SELECT r.seed, r.drawn_at, s.total_stock, clock_timestamp() >= s.draw_at AS due
           FROM raffles r JOIN seckill_vouchers s ON s.voucher_id = r.voucher_id
          WHERE r.voucher_id = $1 FOR UPDATE OF r",
    )
    .bind(voucher)
    .fetch_one(&mut *tx)
    .await?;
    if r.try_get::<Option<DateTime<Utc>>, _>("drawn_at")?.is_some() {
        return Ok(true);
    }
    if !r.try_get::<bool, _>("due")? {
        return Ok(false);
    }
    let seed_hex = hex::encode(r.try_get::<Vec<u8>, _>("seed")?);
    let stock: i32 = r.try_get("total_stock")?;
    let entries: Vec<String> = sqlx::query_scalar("SELECT entry FROM raffle_entries WHERE voucher_id = $1")
        .bind(voucher)
        .fetch_all(&mut *tx)
        .await?;
    let count = entries.len();
    // Hashing and sorting a large list is CPU work: off the async workers.
    let (won, list) = tokio::task::spawn_blocking(move || winners(&seed_hex, &entries, stock.max(0) as usize)).await?;
    sqlx::query("UPDATE raffle_entries SET won = true WHERE voucher_id = $1 AND entry = ANY($2)")
        .bind(voucher)
        .bind(&won)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "UPDATE raffles SET drawn_at = clock_timestamp(), winners = $2, entries = $3, list_hash = $4
          WHERE voucher_id = $1",
    )
    .bind(voucher)
    .bind(won.len() as i32)
    .bind(count as i32)
    .bind(&list)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    tracing::info!(
        voucher_id = voucher,
        entries = count,
        winners = won.len(),
        "raffle drawn"
    );
    Ok(true)
}

/// A shopper's entry: (entry, won: None before the draw).
pub async fn mine(pg: &PgPool, voucher: i64, user: i64) -> Result<Option<(String, Option<bool>)>> {
    draw(pg, voucher).await?;
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
