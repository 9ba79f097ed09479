//! Refilling a dry shard of a sharded sale, and completing moves a process left in
//! transit: the parts of [`crate::voucher::shards`] that decide, rather than step.
//!
//! Cost follows demand. A refill runs only when an order finds its shard dry; one
//! refill of a sale runs at a time across instances (a lease in Redis,
//! [`Keys::refill_lease`]), so at a sell-out the refills do not disturb each
//! other's snapshots and their number is bounded by the instances (each process
//! runs one per sale at a time, and its waiters take that refill's answer:
//! `order::place`), not instances × shards. The lease only saves work: every step
//! stays idempotent, and two refills at once (a lease that ran out) at worst make
//! a snapshot unreadable ("unknown", 503), never a unit created or lost.
//!
//! Every move is written in the registry of moves under way ([`Keys::moves`])
//! before its first step and removed after its last. The recovery pass reads that
//! one hash every second ([`run_recovery`]): an idle sale, sharded or not, costs it
//! nothing. An entry it finds is replayed with its own transfer id: the give, the
//! take and the close are idempotent (a give of an id already spent gives nothing),
//! so replaying the move of a live mover is harmless, and the move of a dead one is
//! completed.
use super::shards::{done, give, settle, snapshot, take, Move};
use crate::keys::Keys;
use crate::recovery::{Floors, Recovery};
use crate::redis_conn::{Conn, Redis};
use anyhow::{bail, Context, Result};
use redis::Script;
use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/lease_release.lua")));

/// How long a refill's lease lasts if its holder never gives it back (a refill
/// takes a few round trips per shard).
const LEASE: Duration = Duration::from_secs(2);
/// How long a refill waits for another's lease before it answers "unknown".
const LEASE_WAIT: Duration = Duration::from_secs(1);
/// How often a waiting refill asks for the lease again.
const LEASE_POLL: Duration = Duration::from_millis(10);

/// What [`refill`] did for a dry shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refill {
    /// Units reached the shard (a move, a completed one, or stock already there):
    /// try the order again.
    Retry,
    /// A consistent reading of every shard found no stock and nothing in transit.
    SoldOut,
    /// No consistent reading could be made (moves all the while), or another
    /// refill held the sale's lease too long: neither "in stock" nor "sold out".
    Unknown,
    /// The sale is closed in this process, or a repair rewrote it meanwhile.
    Closed,
    /// A shard's stock is missing (Redis lost it, or a repair closed it).
    NotLoaded,
    /// A shard went back in time (behind this process's floor); the script closed it.
    Behind,
}

/// Brings units to dry shard `to` of a sale, under the sale's refill lease:
/// completes the moves in transit if there are any, else moves half of the
/// richest shard's stock (at least 1).
pub async fn refill(
    redis: &Redis,
    keys: &Keys,
    recovery: &Recovery,
    voucher: i64,
    shards: u32,
    to: u32,
) -> Result<Refill> {
    if recovery.is_closed(voucher) {
        return Ok(Refill::Closed);
    }
    let mut conn = redis.conn().await?;
    let lease = keys.refill_lease(voucher);
    let token = uuid::Uuid::new_v4().to_string();
    let deadline = Instant::now() + LEASE_WAIT;
    loop {
        let granted: Option<String> = redis::cmd("SET")
            .arg(&lease)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(LEASE.as_millis() as u64)
            .query_async(&mut conn)
            .await
            .context("taking the refill lease")?;
        if granted.is_some() {
            break;
        }
        if Instant::now() >= deadline {
            return Ok(Refill::Unknown);
        }
        tokio::time::sleep(LEASE_POLL).await;
    }
    let outcome = leased(&mut conn, keys, &recovery.floors, voucher, shards, to).await;
    let released: Result<i64, _> = RELEASE.key(&lease).arg(&token).invoke_async(&mut conn).await;
    if let Err(e) = released {
        // It runs out by itself.
        tracing::debug!(voucher, error = %e, "releasing the refill lease failed");
    }
    outcome
}

async fn leased(conn: &mut Conn, keys: &Keys, floors: &Floors, voucher: i64, shards: u32, to: u32) -> Result<Refill> {
    let Some(snap) = snapshot(conn, keys, voucher, shards).await? else {
        return Ok(Refill::Unknown);
    };
    let Some(stocks) = snap.shards.iter().map(|s| s.stock).collect::<Option<Vec<i64>>>() else {
        return Ok(Refill::NotLoaded);
    };
    if !snap.pending.is_empty() {
        settle(conn, keys, floors, voucher, shards, &snap).await?;
        forget(conn, keys, snap.pending.iter().map(|p| p.transfer.as_str())).await?;
        return Ok(Refill::Retry);
    }
    if stocks.get(to as usize).is_some_and(|&s| s > 0) {
        return Ok(Refill::Retry);
    }
    let Some((from, &richest)) = stocks
        .iter()
        .enumerate()
        .filter(|(k, _)| *k != to as usize)
        .max_by_key(|(_, s)| **s)
    else {
        return Ok(Refill::SoldOut);
    };
    if richest <= 0 {
        return Ok(Refill::SoldOut);
    }
    let from = from as u32;
    let transfer = uuid::Uuid::new_v4().to_string();
    let want = (richest / 2).max(1);
    let mv = Move {
        voucher,
        shards,
        from,
        to,
        transfer: &transfer,
    };
    register(conn, keys, &mv, want).await?;
    let outcome = step(conn, keys, floors, &mv, want).await?;
    forget(conn, keys, [transfer.as_str()]).await?;
    Ok(outcome)
}

/// Writes a move in the registry of moves under way, before its first step (a
/// test that plays a mover that dies calls it too).
pub async fn register(conn: &mut Conn, keys: &Keys, mv: &Move<'_>, want: i64) -> Result<()> {
    let Move {
        voucher,
        shards,
        from,
        to,
        transfer,
    } = *mv;
    let _: i64 = redis::cmd("HSET")
        .arg(keys.moves())
        .arg(transfer)
        .arg(format!("{voucher}:{shards}:{from}:{to}:{want}"))
        .query_async(conn)
        .await
        .context("registering a move")?;
    Ok(())
}

async fn forget<'a>(conn: &mut Conn, keys: &Keys, transfers: impl IntoIterator<Item = &'a str>) -> Result<()> {
    let transfers: Vec<&str> = transfers.into_iter().collect();
    if !transfers.is_empty() {
        let _: i64 = redis::cmd("HDEL")
            .arg(keys.moves())
            .arg(&transfers)
            .query_async(conn)
            .await
            .context("forgetting moves")?;
    }
    Ok(())
}

/// The three steps of one registered move (each idempotent by `transfer`).
async fn step(conn: &mut Conn, keys: &Keys, floors: &Floors, mv: &Move<'_>, want: i64) -> Result<Refill> {
    let Move { voucher, from, to, .. } = *mv;
    match give(conn, keys, floors, mv, want).await? {
        (-3, _) => return Ok(Refill::NotLoaded),
        (-4, _) => return Ok(Refill::Behind),
        // Sold meanwhile, or this move was already completed (the recovery pass
        // replayed it): look again.
        (0, _) => return Ok(Refill::Retry),
        (n, _) if n < 0 => bail!("shard_give.lua returned unknown code {n}"),
        (given, at) => match take(conn, keys, floors, mv, given, at).await? {
            -2 => return Ok(Refill::Closed),
            -3 => return Ok(Refill::NotLoaded),
            -4 => return Ok(Refill::Behind),
            _ => {}
        },
    }
    done(conn, keys, mv).await?;
    tracing::debug!(voucher, from, to, "moved units between shards");
    Ok(Refill::Retry)
}

/// Completes (or replays) every move in the registry. Returns how many entries it
/// cleared. A move whose shard is lost or went back in time asks for its sale's
/// repair.
pub async fn recover(redis: &Redis, keys: &Keys, recovery: &Recovery) -> Result<usize> {
    let mut conn = redis.conn().await?;
    let moves: HashMap<String, String> = redis::cmd("HGETALL")
        .arg(keys.moves())
        .query_async(&mut conn)
        .await
        .context("reading the moves under way")?;
    let mut cleared = 0;
    for (transfer, spec) in moves {
        let parsed: Option<Vec<i64>> = spec.split(':').map(|p| p.parse().ok()).collect();
        if let Some(&[voucher, shards, from, to, want]) = parsed.as_deref() {
            let (shards, from, to) = (shards as u32, from as u32, to as u32);
            if recovery.is_closed(voucher) {
                // Its repair clears the ledgers; the entry is done with.
                forget(&mut conn, keys, [transfer.as_str()]).await?;
                cleared += 1;
                continue;
            }
            let mv = Move {
                voucher,
                shards,
                from,
                to,
                transfer: &transfer,
            };
            let r = step(&mut conn, keys, &recovery.floors, &mv, want).await?;
            if matches!(r, Refill::NotLoaded | Refill::Behind) {
                recovery.lost(voucher, "a shard's stock is missing or behind (a move between shards)");
            }
            if r != Refill::Retry {
                // The shard is fenced or lost: the repair rebuilds the sale from
                // Postgres and clears its ledgers; nothing is left to complete.
                tracing::warn!(voucher, transfer, outcome = ?r, "a move cannot be completed; left to the repair");
            }
        } else {
            tracing::warn!(transfer, spec, "dropping a malformed entry of the moves under way");
        }
        forget(&mut conn, keys, [transfer.as_str()]).await?;
        cleared += 1;
    }
    if cleared > 0 {
        tracing::info!(moves = cleared, "completed moves under way");
    }
    Ok(cleared)
}

/// Until `stop`: every `every` (by default a second), [`recover`]: one read of the
/// registry per instance, whatever the number of sales and shards (every API
/// instance runs it; the steps are idempotent).
pub async fn run_recovery(
    redis: Redis,
    keys: Keys,
    recovery: std::sync::Arc<Recovery>,
    every: Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut every = tokio::time::interval(every);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failures = 0u32;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = every.tick() => {}
        }
        match recover(&redis, &keys, &recovery).await {
            Ok(_) => failures = 0,
            Err(err) => {
                failures += 1;
                if failures <= 3 || failures.is_multiple_of(60) {
                    tracing::warn!(error = %format!("{err:#}"), "completing moves failed");
                }
            }
        }
    }
}
