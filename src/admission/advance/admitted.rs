//! The places the frontier has passed: a place's turn by the queue's clock
//! ([`turn_of`]), and the shoppers admitted lately, for the console
//! ([`recent_admitted`]).
use super::super::queue::clock_at;
use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgPool, Row};
use utoipa::ToSchema;

/// A place's turn as the queue's clock counts it.
#[derive(Clone, Copy, Debug)]
pub struct Turn {
    /// When the frontier passed the place.
    pub admitted_at: DateTime<Utc>,
    /// Seconds of the turn gone by (the sale's pauses do not count).
    pub used_secs: f64,
    /// The queue's pauses so far in total, the one going on included: what an
    /// admission token names, so that a pause after it lengthens it.
    pub paused_secs: f64,
    /// Whether the sale is paused now.
    pub paused: bool,
}

/// `place`'s turn now (None if it has not been admitted).
pub async fn turn_of(pg: &PgPool, voucher: i64, place: i64) -> Result<Option<Turn>> {
    let row = sqlx::query(
        "SELECT a.at, coalesce(a.clock, extract(epoch FROM a.at)::float8) AS clock, q.paused_at, q.paused_secs,
                clock_timestamp() AS now
           FROM queue_admits a JOIN admission_queues q ON q.voucher_id = a.voucher_id
          WHERE a.voucher_id = $1 AND a.upto >= $2 ORDER BY a.upto LIMIT 1",
    )
    .bind(voucher)
    .bind(place)
    .fetch_optional(pg)
    .await?;
    let Some(r) = row else { return Ok(None) };
    let (now, paused_at, paused_secs): (DateTime<Utc>, Option<DateTime<Utc>>, f64) =
        (r.try_get("now")?, r.try_get("paused_at")?, r.try_get("paused_secs")?);
    let clock: f64 = r.try_get("clock")?;
    let queue_now = clock_at(now, paused_secs, paused_at);
    let open = paused_at.map_or(0.0, |p| (now - p).num_milliseconds().max(0) as f64 / 1e3);
    Ok(Some(Turn {
        admitted_at: r.try_get("at")?,
        used_secs: (queue_now - clock).max(0.0),
        paused_secs: paused_secs + open,
        paused: paused_at.is_some(),
    }))
}

/// One admitted shopper, for the console.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Admitted {
    pub place: i64,
    #[serde(with = "crate::id")]
    #[schema(schema_with = crate::id::schema)]
    pub user_id: i64,
    /// When the frontier passed the place.
    pub admitted_at: Option<DateTime<Utc>>,
}

/// The last `limit` shoppers admitted, latest first.
pub async fn recent_admitted(pg: &PgPool, voucher: i64, admitted: i64, limit: i64) -> Result<Vec<Admitted>> {
    let rows = sqlx::query(
        "SELECT p.place, p.user_id,
                (SELECT a.at FROM queue_admits a WHERE a.voucher_id = p.voucher_id AND a.upto >= p.place
                  ORDER BY a.upto LIMIT 1) AS at
           FROM queue_places p WHERE p.voucher_id = $1 AND p.place <= $2 ORDER BY p.place DESC LIMIT $3",
    )
    .bind(voucher)
    .bind(admitted)
    .bind(limit)
    .fetch_all(pg)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(Admitted {
                place: r.try_get("place")?,
                user_id: r.try_get("user_id")?,
                admitted_at: r.try_get("at")?,
            })
        })
        .collect()
}
