//! Refilling a dry shard of a sharded sale: the part of [`crate::sales::shards`]
//! that decides, rather than steps ([`crate::sales::moves`] completes the moves
//! a process left in transit).
//!
//! Cost follows demand. A refill runs only when an order finds its shard dry; one
//! refill of a sale runs at a time across instances (a lease on the sale's shard 0,
//! [`Keys::refill_lease`]), so at a sell-out the refills do not disturb each
//! other's snapshots and their number is bounded by the instances (each process
//! runs one per sale at a time, and its waiters take that refill's answer:
//! `ordering::place`), not instances × shards. The lease only saves work: every step
//! stays idempotent, and two refills at once (a lease that ran out) at worst make
//! a snapshot unreadable ("unknown", 503), never a unit created or lost. Every
//! move is written in its sale's registry of moves under way ([`Keys::moves_of`])
//! before its first step and removed after its last.
use super::shards::{done, give, settle, snapshot, take, Move};
use crate::keys::Keys;
use crate::recovery::history::{read_shard, Call};
use crate::recovery::Recovery;
use crate::redis_conn::{Conn, Redis};
use anyhow::{bail, Context, Result};
use redis::Script;
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
    /// A shard went back in time (it no longer holds a point this process saw):
    /// a give or a take found it so and closed it, or the check before "sold
    /// out" did (read-only: the repair asked for closes the sale's shards).
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
    let outcome = leased(&mut conn, keys, recovery, voucher, shards, to).await;
    let released: Result<i64, _> = RELEASE.key(&lease).arg(&token).invoke_async(&mut conn).await;
    if let Err(e) = released {
        // It runs out by itself.
        tracing::debug!(voucher, error = %e, "releasing the refill lease failed");
    }
    outcome
}

async fn leased(
    conn: &mut Conn,
    keys: &Keys,
    recovery: &Recovery,
    voucher: i64,
    shards: u32,
    to: u32,
) -> Result<Refill> {
    let Some(snap) = snapshot(conn, keys, voucher, shards).await? else {
        return Ok(Refill::Unknown);
    };
    let Some(stocks) = snap.shards.iter().map(|s| s.stock).collect::<Option<Vec<i64>>>() else {
        return Ok(Refill::NotLoaded);
    };
    if !snap.pending.is_empty() {
        let closed = settle(conn, keys, recovery, voucher, shards, &snap).await?;
        forget(conn, keys, voucher, closed.iter().map(String::as_str)).await?;
        return Ok(Refill::Retry);
    }
    if stocks.get(to as usize).is_some_and(|&s| s > 0) {
        return Ok(Refill::Retry);
    }
    let richest = stocks
        .iter()
        .enumerate()
        .filter(|(k, _)| *k != to as usize)
        .max_by_key(|(_, s)| **s)
        .filter(|(_, s)| **s > 0);
    let Some((from, _)) = richest else {
        return sold_out(conn, keys, recovery, voucher, shards).await;
    };
    let richest = stocks[from];
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
    let (outcome, over) = step(conn, keys, recovery, &mv, want).await?;
    if over {
        forget(conn, keys, voucher, [transfer.as_str()]).await?;
    }
    Ok(outcome)
}

/// "Sold out", once every shard still holds what this process saw of it. The
/// snapshot passes no points: a shard that went back (a take, a return or a
/// top-up a failover lost) reads dry, and its units would be sold out of
/// existence; read with this process's points (`lua/shard_read.lua`), it is found
/// behind instead, and its sale repaired.
async fn sold_out(conn: &mut Conn, keys: &Keys, recovery: &Recovery, voucher: i64, shards: u32) -> Result<Refill> {
    for k in 0..shards {
        let tag = crate::keys::shard_tag(voucher, k, shards);
        let call = Call::on(recovery.histories.shard(&tag));
        let read = read_shard(conn, keys, &tag, &call.snap, None)
            .await
            .context("checking the shards before answering sold out")?;
        if read.lost {
            return Ok(Refill::Behind);
        }
        if !read.open {
            return Ok(Refill::NotLoaded);
        }
        call.passed(read.seq, false);
    }
    Ok(Refill::SoldOut)
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
        .arg(keys.moves_of(voucher))
        .arg(transfer)
        .arg(format!("{voucher}:{shards}:{from}:{to}:{want}"))
        .query_async(conn)
        .await
        .context("registering a move")?;
    Ok(())
}

/// Removes moves of `voucher`'s sale from its registry.
async fn forget<'a>(
    conn: &mut Conn,
    keys: &Keys,
    voucher: i64,
    transfers: impl IntoIterator<Item = &'a str>,
) -> Result<()> {
    let transfers: Vec<&str> = transfers.into_iter().collect();
    if !transfers.is_empty() {
        let _: i64 = redis::cmd("HDEL")
            .arg(keys.moves_of(voucher))
            .arg(&transfers)
            .query_async(conn)
            .await
            .context("forgetting moves")?;
    }
    Ok(())
}

/// The three steps of one registered move (each idempotent by `transfer`): what
/// it came to, and whether the move is over (closed, spent, or left to a repair:
/// forgotten by the registry) or to be replayed (a step short of its replicas).
pub(super) async fn step(
    conn: &mut Conn,
    keys: &Keys,
    recovery: &Recovery,
    mv: &Move<'_>,
    want: i64,
) -> Result<(Refill, bool)> {
    let Move { voucher, from, to, .. } = *mv;
    match give(conn, keys, recovery, mv, want).await? {
        (-3, _, _) => return Ok((Refill::NotLoaded, true)),
        (-4, _, _) => return Ok((Refill::Behind, true)),
        // Sold meanwhile, or this move was already completed (the recovery pass
        // replayed it): look again.
        (0, _, _) => return Ok((Refill::Retry, true)),
        (n, _, _) if n < 0 => bail!("shard_give.lua returned unknown code {n}"),
        // Not taken before the replicas hold the give: replayed later.
        (_, _, false) => return Ok((Refill::Unknown, false)),
        (given, at, true) => match take(conn, keys, recovery, mv, given, at).await? {
            (-2, _) => return Ok((Refill::Closed, true)),
            (-3, _) => return Ok((Refill::NotLoaded, true)),
            (-4, _) => return Ok((Refill::Behind, true)),
            (_, false) => return Ok((Refill::Unknown, false)),
            _ => {}
        },
    }
    done(conn, keys, mv).await?;
    tracing::debug!(voucher, from, to, "moved units between shards");
    Ok((Refill::Retry, true))
}
