//! A raffle's close and draw, in the background: no request waits on them.
//!
//! **Submitting the beacon** ([`submit`]): anyone may send the named round's
//! signature once the entries have closed (`draw_at` passed). It is verified
//! against the sale's chain; a wrong round or a signature that does not verify
//! is refused. Stored once (a BLS signature of a round is unique).
//!
//! **The close** ([`close`]), after `draw_at`: one instance (the raffle's row
//! taken `FOR NO KEY UPDATE SKIP LOCKED`: whoever holds it, the others skip; a
//! beacon stored meanwhile takes only a key share, which does not wait) fixes the
//! entry list's hash (in SQL), the count, and the number of winners: the sale's
//! total stock (read last, in share mode: a top-up that checked the clock before
//! `draw_at` is counted; none may start after) or fewer entries.
//!
//! **The draw** ([`draw`]), once closed and the signature is in: the first
//! `winners` entries by `sha256(randomness:seed:list_hash:entry)`, then entry, in
//! one `UPDATE ... ORDER BY ... LIMIT` in Postgres. Both are one transaction
//! each: a crash leaves no trace, and running either again does the same.
//!
//! [`settle_due`] runs both for every raffle due, on a tick of every instance;
//! a submission also starts them at once. Where `SECKILL_BEACON_URL` names a
//! drand HTTP relay, [`fetch_due`] asks it for rounds due and submits them.
mod close;

use super::beacon::Chain;
use super::rule::score_prefix;
use anyhow::{Context, Result};
use sqlx::{PgPool, Row};

pub use close::close;

/// What a submitted signature did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// Verified and stored (`new`: by this call; false: the same signature was
    /// in already): the draw follows.
    Accepted { new: bool },
    /// Entries are still open (before `draw_at`).
    Open,
    /// Not the round the sale named (which is this).
    WrongRound(i64),
    /// Not the chain's signature of the round.
    BadSignature,
    /// A raffle drawn before beacons.
    WithoutBeacon,
}

/// The chain and round a raffle draws with, and whether its entries are closed
/// by Postgres's clock.
async fn committed(pg: &PgPool, voucher: i64) -> Result<Option<(Chain, i64, bool)>> {
    let r = sqlx::query(&format!(
        "SELECT r.beacon_key, r.beacon_genesis, r.beacon_period, r.beacon_round, clock_timestamp() >= s.draw_at AS due
           FROM raffles r {SALE} WHERE r.voucher_id = $1",
        SALE = crate::sales::sql::JOIN_SALE_OF_RAFFLE
    ))
    .bind(voucher)
    .fetch_optional(pg)
    .await?
    .context("a raffle sale without its raffle row")?;
    let (Some(chain), Some(round)) = super::beacon::of_row(&r)? else {
        return Ok(None);
    };
    Ok(Some((chain, round, r.try_get("due")?)))
}

/// Verifies `signature` (hex) as the raffle's round and stores it. A signature
/// stored already is compared, not verified again (a round has one signature):
/// a crowd replaying it costs no pairing.
pub async fn submit(pg: &PgPool, voucher: i64, round: i64, signature: &str) -> Result<Submitted> {
    let sig = signature.to_ascii_lowercase();
    let stored: Option<(i64, String)> =
        sqlx::query_as("SELECT round, signature FROM raffle_beacons WHERE voucher_id = $1")
            .bind(voucher)
            .fetch_optional(pg)
            .await?;
    if let Some((stored_round, stored_sig)) = stored {
        return Ok(match (stored_round == round, stored_sig == sig) {
            (true, true) => Submitted::Accepted { new: false },
            (true, false) => Submitted::BadSignature,
            (false, _) => Submitted::WrongRound(stored_round),
        });
    }
    let Some((chain, committed, due)) = committed(pg, voucher).await? else {
        return Ok(Submitted::WithoutBeacon);
    };
    if !due {
        return Ok(Submitted::Open);
    }
    if round != committed {
        return Ok(Submitted::WrongRound(committed));
    }
    let checked = sig.clone();
    // A pairing: milliseconds of CPU, off the async workers.
    let Ok(randomness) = tokio::task::spawn_blocking(move || chain.verify(round, &checked)).await? else {
        return Ok(Submitted::BadSignature);
    };
    let made = sqlx::query(
        "INSERT INTO raffle_beacons (voucher_id, round, signature, randomness) VALUES ($1, $2, $3, $4)
         ON CONFLICT (voucher_id) DO NOTHING",
    )
    .bind(voucher)
    .bind(round)
    .bind(&sig)
    .bind(&randomness)
    .execute(pg)
    .await?
    .rows_affected();
    Ok(Submitted::Accepted { new: made == 1 })
}

/// Closes and draws every raffle that is due (each as far as it can go now);
/// one raffle's failure is logged and the others go on.
pub async fn settle_due(pg: &PgPool) -> Result<()> {
    let due: Vec<i64> = sqlx::query_scalar(&format!(
        "SELECT r.voucher_id
           FROM raffles r {SALE}
           LEFT JOIN raffle_beacons b ON b.voucher_id = r.voucher_id
          WHERE r.drawn_at IS NULL AND s.draw_at <= clock_timestamp()
            AND (r.closed_at IS NULL OR b.voucher_id IS NOT NULL)",
        SALE = crate::sales::sql::JOIN_SALE_OF_RAFFLE
    ))
    .fetch_all(pg)
    .await?;
    for voucher in due {
        if let Err(e) = settle(pg, voucher).await {
            tracing::warn!(voucher_id = voucher, error = ?e, "raffle not settled this round");
        }
    }
    Ok(())
}

/// Closes the raffle if due, then draws it if its beacon is in.
pub async fn settle(pg: &PgPool, voucher: i64) -> Result<()> {
    close(pg, voucher).await?;
    draw(pg, voucher).await?;
    Ok(())
}

/// Draws the raffle if it is closed, its beacon is in and nobody has drawn it
/// (or is drawing it): true if this call drew it.
pub async fn draw(pg: &PgPool, voucher: i64) -> Result<bool> {
    let mut tx = pg.begin().await?;
    sqlx::query("SET LOCAL statement_timeout = 0").execute(&mut *tx).await?;
    let r = sqlx::query(
        "SELECT r.seed, r.list_hash, r.winners, b.randomness
           FROM raffles r JOIN raffle_beacons b ON b.voucher_id = r.voucher_id AND b.round = r.beacon_round
          WHERE r.voucher_id = $1 AND r.closed_at IS NOT NULL AND r.drawn_at IS NULL
          FOR NO KEY UPDATE OF r SKIP LOCKED",
    )
    .bind(voucher)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(r) = r else {
        return Ok(false);
    };
    let seed = hex::encode(r.try_get::<Vec<u8>, _>("seed")?);
    let list: String = r.try_get("list_hash")?;
    let winners: i32 = r.try_get("winners")?;
    let randomness: String = r.try_get("randomness")?;
    let prefix = score_prefix(Some(&randomness), &seed, &list);
    // sha256 as bytea sorts as its lower-case hex does; entries are hex too.
    let won = sqlx::query(
        "UPDATE raffle_entries SET won = true
          WHERE voucher_id = $1 AND entry IN (
                SELECT entry FROM raffle_entries WHERE voucher_id = $1
                 ORDER BY sha256(convert_to($2 || entry, 'UTF8')), entry COLLATE \"C\" LIMIT $3)",
    )
    .bind(voucher)
    .bind(&prefix)
    .bind(i64::from(winners))
    .execute(&mut *tx)
    .await?
    .rows_affected();
    anyhow::ensure!(
        won == winners.max(0) as u64,
        "raffle {voucher}: {won} entries won, the close fixed {winners}"
    );
    sqlx::query("UPDATE raffles SET drawn_at = clock_timestamp() WHERE voucher_id = $1")
        .bind(voucher)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    tracing::info!(voucher_id = voucher, winners, randomness = %randomness, "raffle drawn");
    Ok(true)
}

/// Asks a drand HTTP relay (`base`: `SECKILL_BEACON_URL`, e.g.
/// `https://api.drand.sh/<chain hash>`) for the rounds of closed raffles that are
/// due by their chain's clock, and submits what it answers. A round the relay
/// does not have yet, or a signature of another chain, is tried again later.
pub async fn fetch_due(pg: &PgPool, http: &reqwest::Client, base: &str) -> Result<()> {
    let due: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT r.voucher_id, r.beacon_round
           FROM raffles r LEFT JOIN raffle_beacons b ON b.voucher_id = r.voucher_id
          WHERE r.drawn_at IS NULL AND r.closed_at IS NOT NULL AND b.voucher_id IS NULL
            AND r.beacon_genesis + (r.beacon_round - 1) * r.beacon_period <= extract(epoch FROM clock_timestamp())",
    )
    .fetch_all(pg)
    .await?;
    for (voucher, round) in due {
        let url = format!("{}/public/{round}", base.trim_end_matches('/'));
        let answer = async {
            let bytes = http.get(&url).send().await?.error_for_status()?.bytes().await?;
            let body: serde_json::Value = serde_json::from_slice(&bytes)?;
            let sig = body
                .get("signature")
                .and_then(|s| s.as_str())
                .context("no signature in the relay's answer")?
                .to_owned();
            anyhow::Ok(sig)
        }
        .await;
        // One raffle's failure does not keep the others from their rounds.
        let done = async {
            match submit(pg, voucher, round, &answer?).await? {
                Submitted::Accepted { .. } => {
                    tracing::info!(voucher_id = voucher, round, "beacon round fetched");
                    settle(pg, voucher).await
                }
                other => {
                    tracing::warn!(voucher_id = voucher, round, ?other, "the relay's round was refused");
                    Ok(())
                }
            }
        }
        .await;
        if let Err(e) = done {
            tracing::debug!(voucher_id = voucher, round, error = %e, "beacon round not fetched");
        }
    }
    Ok(())
}
