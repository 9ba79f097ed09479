//! A raffle's close: after `draw_at`, the entry list, its hash and the number of
//! winners are fixed, and the beacon round is made sure to be still unpublished.
use super::super::beacon::{of_row, Chain, MARGIN_SECS};
use anyhow::{Context, Result};
use sqlx::{PgPool, Row};

/// Fixes the entry list, its hash and the number of winners, if `draw_at` has
/// passed and nobody has (or is): true if this call closed it.
///
/// The round must still be unpublished when the list is fixed. A close that
/// runs within two seconds of the round's time (a close held up: a stalled
/// entry, every instance down) moves the raffle to the chain's first round
/// [`MARGIN_SECS`] after now, and says so (`beacon_named_round` keeps the round
/// named at creation; the summary and `seckill raffle verify` show both). A
/// raffle an older binary created without a beacon gets quicknet's first such
/// round.
pub async fn close(pg: &PgPool, voucher: i64) -> Result<bool> {
    let mut tx = pg.begin().await?;
    // A large raffle must not be cut short and retried forever; nobody waits on it.
    sqlx::query("SET LOCAL statement_timeout = 0").execute(&mut *tx).await?;
    let mine: Option<i64> = sqlx::query_scalar(
        "SELECT voucher_id FROM raffles
          WHERE voucher_id = $1 AND closed_at IS NULL AND drawn_at IS NULL
          FOR NO KEY UPDATE SKIP LOCKED",
    )
    .bind(voucher)
    .fetch_optional(&mut *tx)
    .await?;
    if mine.is_none() {
        return Ok(false);
    }
    let due = crate::sales::sql::draw_due(&mut tx, voucher).await?;
    if !due {
        return Ok(false);
    }
    // Every entry is in: an entry holds the row in share mode while it checks the
    // clock, and the row is ours now, past draw_at.
    let (count, list): (i64, String) = sqlx::query_as(
        "SELECT count(*), encode(sha256(convert_to(coalesce(
                    string_agg(entry || E'\\n', '' ORDER BY entry COLLATE \"C\"), ''), 'UTF8')), 'hex')
           FROM raffle_entries WHERE voucher_id = $1",
    )
    .bind(voucher)
    .fetch_one(&mut *tx)
    .await?;
    // Last, and in share mode: a top-up that checked the clock before draw_at and
    // has not committed is waited for (briefly) and counted.
    let stock = crate::sales::sql::total_stock_shared(&mut tx, voucher).await?;
    let winners = count.min(i64::from(stock.max(0)));
    let moved = unpublished_round(&mut tx, voucher).await?;
    sqlx::query(
        "UPDATE raffles SET closed_at = clock_timestamp(), entries = $2, list_hash = $3, winners = $4
          WHERE voucher_id = $1",
    )
    .bind(voucher)
    .bind(i32::try_from(count).context("more entries than an INT holds")?)
    .bind(&list)
    .bind(winners as i32)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    tracing::info!(voucher_id = voucher, entries = count, winners, list_hash = %list, "raffle entries closed");
    if let Some((from, to)) = moved {
        tracing::warn!(
            voucher_id = voucher,
            named_round = ?from,
            round = to,
            "raffle closed too late for the round it named: it draws with a later round"
        );
    }
    Ok(true)
}

/// Makes sure the raffle's round is still unpublished (by Postgres's clock, two
/// seconds to spare), moving it to the first round [`MARGIN_SECS`] from now if
/// not, or naming quicknet's for a raffle without a beacon. Some((named, new))
/// if it moved. In the close's transaction, the raffle's row held.
async fn unpublished_round(tx: &mut sqlx::PgConnection, voucher: i64) -> Result<Option<(Option<i64>, i64)>> {
    let r = sqlx::query(
        "SELECT beacon_key, beacon_genesis, beacon_period, beacon_round, clock_timestamp() AS now
           FROM raffles WHERE voucher_id = $1",
    )
    .bind(voucher)
    .fetch_one(&mut *tx)
    .await?;
    let now: chrono::DateTime<chrono::Utc> = r.try_get("now")?;
    let (chain, named) = of_row(&r)?;
    // A raffle an older binary made without a beacon: quicknet.
    let chain = chain.unwrap_or_else(Chain::quicknet);
    if let Some(round) = named {
        if chain.round_at(round) > now + chrono::Duration::seconds(2) {
            return Ok(None);
        }
    }
    let round = chain.first_round_from(now + chrono::Duration::seconds(MARGIN_SECS));
    sqlx::query(
        "UPDATE raffles SET beacon_key = $2, beacon_genesis = $3, beacon_period = $4, beacon_round = $5,
                beacon_named_round = coalesce(beacon_named_round, beacon_round)
          WHERE voucher_id = $1",
    )
    .bind(voucher)
    .bind(&chain.public_key)
    .bind(chain.genesis_time)
    .bind(chain.period)
    .bind(round)
    .execute(&mut *tx)
    .await?;
    // A signature of the round given up (submitted before the close) draws nothing.
    sqlx::query("DELETE FROM raffle_beacons WHERE voucher_id = $1 AND round <> $2")
        .bind(voucher)
        .bind(round)
        .execute(&mut *tx)
        .await?;
    Ok(Some((named, round)))
}
