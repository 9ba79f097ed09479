//! What may be read of a raffle: its public summary, a shopper's own entry, the
//! published entry list and, for the admin, the winners. Reads only: the close
//! and the draw happen in the background ([`super::super::draw`]).
use super::super::beacon::{of_row, Beacon};
use super::super::rule::{RULE, RULE_WITHOUT_BEACON};
use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgPool, Row};
use utoipa::ToSchema;

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
/// background ([`super::super::draw`]).
pub async fn summary(pg: &PgPool, voucher: i64) -> Result<Summary> {
    let r = sqlx::query(&format!(
        "SELECT r.commitment, s.draw_at, CASE WHEN r.drawn_at IS NOT NULL THEN r.seed END AS seed, r.drawn_at,
                r.closed_at, r.winners, r.list_hash, clock_timestamp() >= s.draw_at AS due,
                coalesce(r.entries::bigint,
                         (SELECT count(*) FROM raffle_entries e WHERE e.voucher_id = r.voucher_id)) AS entries,
                r.beacon_key, r.beacon_genesis, r.beacon_period, r.beacon_round, r.beacon_named_round,
                b.signature, b.randomness
           FROM raffles r {SALE}
           LEFT JOIN raffle_beacons b ON b.voucher_id = r.voucher_id AND b.round = r.beacon_round
          WHERE r.voucher_id = $1",
        SALE = crate::sales::sql::JOIN_SALE_OF_RAFFLE
    ))
    .bind(voucher)
    .fetch_optional(pg)
    .await?
    .context("a raffle sale without its raffle row")?;
    let beacon = match of_row(&r)? {
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
