//! Sharded sales: one sale's stock and shopper marks over `stock_shards` hash tags,
//! and the moves of units between them.
//!
//! A shopper always lands on the shard [`crate::keys::shard_of`] names, so the one
//! order per shopper stays one atomic script (`reserve.lua` on that shard). When the
//! shard runs dry while others still hold stock, [`refill`] moves units from the
//! richest shard to it, in three idempotent steps on two slots:
//!
//! 1. `shard_give.lua` on the donor: stock − n, and the ledger entry
//!    `given[transfer] = "dest:n"` (the units are now in transit);
//! 2. `shard_take.lua` on the receiver: stock + n, and `transfer` in its `taken` set;
//! 3. `shard_done.lua` on the donor: the entry leaves `given` for `moved`.
//!
//! A process that dies between the steps leaves the entry in `given`; [`recover`]
//! (every API instance, each second, for the running sharded sales, and every
//! refill before it calls a sale sold out) takes it into its receiver (once: the
//! `taken` set) and closes it. A give retried with the same id finds its entry and
//! gives nothing more; a take retried finds its id taken. So units are never created
//! or destroyed: at every instant each is on sale in one shard, in one `given`
//! entry not yet taken, or sold.
//!
//! Every step runs only on a server the service verified, and gives or takes
//! nothing once a repair newer than the caller's epoch rewrote the shard (its
//! fence); a repair clears the ledgers ([`crate::epoch`]).
use crate::keys::Keys;
use crate::redis_conn::{Conn, Redis};
use anyhow::{bail, Context, Result};
use redis::Script;
use std::collections::HashMap;
use std::sync::LazyLock;

static GIVE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/shard_give.lua")));
static TAKE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/shard_take.lua")));
static DONE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/shard_done.lua")));

/// How many times a snapshot is read again to find two consecutive reads that
/// agree on every move (see [`snapshot`]).
const SNAPSHOT_TRIES: usize = 8;

/// One entry of a donor's ledger: units given, perhaps not yet taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    pub from: u32,
    pub to: u32,
    pub transfer: String,
    pub units: i64,
    /// The receiver has taken the units (only the donor's entry is left to close).
    pub taken: bool,
}

/// What one shard holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardBooks {
    /// None if the shard's stock key is missing (Redis lost the sale).
    pub stock: Option<i64>,
    pub orders: i64,
    pub returned: i64,
    pub outbox: i64,
    /// The size of the shard's `taken` set (it only grows).
    taken: i64,
}

/// Every shard of a sale at one instant, as far as moves are concerned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub shards: Vec<ShardBooks>,
    /// The donors' ledger entries, in shard and transfer order.
    pub pending: Vec<Pending>,
}

impl Snapshot {
    /// Units on sale over all shards; None if a shard's stock is missing.
    pub fn stock(&self) -> Option<i64> {
        self.shards.iter().map(|s| s.stock).sum()
    }

    /// Units given by a donor and not yet taken by their receiver.
    pub fn in_transit(&self) -> i64 {
        self.pending.iter().filter(|p| !p.taken).map(|p| p.units).sum()
    }

    /// What changes with every move step: the ledgers and the `taken` sets.
    fn moves(&self) -> (Vec<(&str, bool)>, Vec<i64>) {
        (
            self.pending.iter().map(|p| (p.transfer.as_str(), p.taken)).collect(),
            self.shards.iter().map(|s| s.taken).collect(),
        )
    }
}

/// One read of every shard, each in one `MULTI` (a shard's keys share a slot).
async fn collect(conn: &mut Conn, keys: &Keys, voucher: i64, shards: u32) -> Result<Snapshot> {
    let reads = (0..shards).map(|k| {
        let mut conn = conn.clone();
        async move {
            type Reply = (Option<i64>, HashMap<String, String>, i64, i64, i64, i64);
            let r: Reply = redis::pipe()
                .atomic()
                .get(keys.stock_at(voucher, k, shards))
                .hgetall(keys.given_at(voucher, k, shards))
                .scard(keys.taken_at(voucher, k, shards))
                .hlen(keys.orders_at(voucher, k, shards))
                .scard(keys.returned_at(voucher, k, shards))
                .cmd("XLEN")
                .arg(keys.outbox_at(voucher, k, shards))
                .query_async(&mut conn)
                .await
                .with_context(|| format!("reading shard {k} of sale {voucher}"))?;
            anyhow::Ok(r)
        }
    });
    let replies = futures::future::try_join_all(reads).await?;
    let mut snap = Snapshot::default();
    for (k, (stock, given, taken, orders, returned, outbox)) in replies.into_iter().enumerate() {
        let mut entries: Vec<Pending> = given
            .into_iter()
            .filter_map(|(transfer, v)| {
                let (to, n) = v.split_once(':')?;
                Some(Pending {
                    from: k as u32,
                    to: to.parse().ok()?,
                    transfer,
                    units: n.parse().ok()?,
                    taken: false,
                })
            })
            .collect();
        entries.sort_by(|a, b| a.transfer.cmp(&b.transfer));
        snap.pending.extend(entries);
        snap.shards.push(ShardBooks {
            stock,
            orders,
            returned,
            outbox,
            taken,
        });
    }
    if !snap.pending.is_empty() {
        let mut pipe = redis::pipe();
        for p in &snap.pending {
            pipe.sismember(keys.taken_at(voucher, p.to, shards), &p.transfer);
        }
        let taken: Vec<bool> = pipe.query_async(conn).await.context("reading which moves were taken")?;
        for (p, t) in snap.pending.iter_mut().zip(taken) {
            p.taken = t;
        }
    }
    Ok(snap)
}

/// Every shard of a sale as at one instant as far as moves go: reads until two
/// consecutive reads agree on every ledger and `taken` set (each step of a move
/// changes one of them, and none ever returns to an earlier value), so no move
/// step fell between them and the first read counts each unit once. Orders and
/// returns change one shard at a time, atomically, so they need no such care.
/// After [`SNAPSHOT_TRIES`] reads that all disagree (moves all the while), the last
/// one is returned: it may be off by the units of one move.
pub async fn snapshot(conn: &mut Conn, keys: &Keys, voucher: i64, shards: u32) -> Result<Snapshot> {
    let shards = shards.max(1);
    let mut last = collect(conn, keys, voucher, shards).await?;
    if shards <= 1 {
        return Ok(last);
    }
    for _ in 1..SNAPSHOT_TRIES {
        let next = collect(conn, keys, voucher, shards).await?;
        if next.moves() == last.moves() {
            return Ok(last);
        }
        last = next;
    }
    Ok(last)
}

/// Step 1 on the donor; returns the units given (see `lua/shard_give.lua`).
#[allow(clippy::too_many_arguments)]
pub async fn give(
    conn: &mut Conn,
    keys: &Keys,
    voucher: i64,
    shards: u32,
    from: u32,
    to: u32,
    transfer: &str,
    want: i64,
    epoch: i64,
) -> Result<i64> {
    GIVE.key(keys.stock_at(voucher, from, shards))
        .key(keys.given_at(voucher, from, shards))
        .key(keys.moved_at(voucher, from, shards))
        .key(keys.repair_fence_at(voucher, from, shards))
        .arg(transfer)
        .arg(to)
        .arg(want)
        .arg(epoch)
        .invoke_async(conn)
        .await
        .context("shard_give.lua")
}

/// Step 2 on the receiver (see `lua/shard_take.lua`).
#[allow(clippy::too_many_arguments)]
pub async fn take(
    conn: &mut Conn,
    keys: &Keys,
    voucher: i64,
    shards: u32,
    to: u32,
    transfer: &str,
    units: i64,
    epoch: i64,
) -> Result<i64> {
    TAKE.key(keys.stock_at(voucher, to, shards))
        .key(keys.taken_at(voucher, to, shards))
        .key(keys.repair_fence_at(voucher, to, shards))
        .arg(transfer)
        .arg(units)
        .arg(epoch)
        .invoke_async(conn)
        .await
        .context("shard_take.lua")
}

/// Step 3 on the donor (see `lua/shard_done.lua`).
pub async fn done(conn: &mut Conn, keys: &Keys, voucher: i64, shards: u32, from: u32, transfer: &str) -> Result<()> {
    let _: i64 = DONE
        .key(keys.given_at(voucher, from, shards))
        .key(keys.moved_at(voucher, from, shards))
        .arg(transfer)
        .invoke_async(conn)
        .await
        .context("shard_done.lua")?;
    Ok(())
}

/// Takes and closes `pending` moves. Returns how many it closed; an entry whose
/// receiver refuses (a repair rewrote it, or lost its stock) stays for the repair.
pub async fn settle(
    conn: &mut Conn,
    keys: &Keys,
    voucher: i64,
    shards: u32,
    epoch: i64,
    pending: &[Pending],
) -> Result<usize> {
    let mut closed = 0;
    for p in pending {
        let r = take(conn, keys, voucher, shards, p.to, &p.transfer, p.units, epoch).await?;
        if r < 0 {
            tracing::warn!(voucher, transfer = %p.transfer, code = r, "a move cannot be taken; left for the repair");
            continue;
        }
        done(conn, keys, voucher, shards, p.from, &p.transfer).await?;
        closed += 1;
    }
    Ok(closed)
}

/// Completes the moves a crashed or interrupted process left in transit. Returns
/// how many it completed (0 also when the server is not verified).
pub async fn recover(redis: &Redis, keys: &Keys, voucher: i64, shards: u32) -> Result<usize> {
    if shards <= 1 {
        return Ok(0);
    }
    let Some((mut conn, epoch)) = redis.verified().await? else {
        return Ok(0);
    };
    let snap = collect(&mut conn, keys, voucher, shards).await?;
    if snap.pending.is_empty() {
        return Ok(0);
    }
    let n = settle(&mut conn, keys, voucher, shards, epoch, &snap.pending).await?;
    if n > 0 {
        tracing::info!(voucher, moves = n, "completed moves left in transit");
    }
    Ok(n)
}

/// What [`refill`] did for a dry shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refill {
    /// Units reached the shard (a move, a completed one, or stock already there):
    /// try the order again.
    Retry,
    /// No shard holds stock and nothing is in transit.
    SoldOut,
    /// The server is not verified, or a repair rewrote the sale meanwhile.
    Unverified,
    /// A shard's stock is missing (Redis lost the sale).
    NotLoaded,
}

/// Brings units to dry shard `to` of a sale: completes the moves in transit if
/// there are any, else moves half of the richest shard's stock (at least 1).
pub async fn refill(redis: &Redis, keys: &Keys, voucher: i64, shards: u32, to: u32) -> Result<Refill> {
    let Some((mut conn, epoch)) = redis.verified().await? else {
        return Ok(Refill::Unverified);
    };
    let snap = snapshot(&mut conn, keys, voucher, shards).await?;
    let Some(stocks) = snap.shards.iter().map(|s| s.stock).collect::<Option<Vec<i64>>>() else {
        return Ok(Refill::NotLoaded);
    };
    if !snap.pending.is_empty() {
        settle(&mut conn, keys, voucher, shards, epoch, &snap.pending).await?;
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
    let given = give(&mut conn, keys, voucher, shards, from, to, &transfer, want, epoch).await?;
    match given {
        -2 => return Ok(Refill::Unverified),
        -3 => return Ok(Refill::NotLoaded),
        // Sold meanwhile: look again.
        0 => return Ok(Refill::Retry),
        n if n < 0 => bail!("shard_give.lua returned unknown code {n}"),
        _ => {}
    }
    match take(&mut conn, keys, voucher, shards, to, &transfer, given, epoch).await? {
        -2 => return Ok(Refill::Unverified),
        -3 => return Ok(Refill::NotLoaded),
        _ => {}
    }
    done(&mut conn, keys, voucher, shards, from, &transfer).await?;
    tracing::debug!(voucher, from, to, units = given, "moved units between shards");
    Ok(Refill::Retry)
}

/// Until `stop`: `every` (by default a second), [`recover`] for every sharded sale in
/// `cache` that has not ended (every API instance runs it; the steps are idempotent).
pub async fn run_recovery(
    redis: Redis,
    keys: Keys,
    cache: std::sync::Arc<crate::voucher::cache::VoucherCache>,
    every: std::time::Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut every = tokio::time::interval(every);
    let mut failures = 0u32;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = every.tick() => {}
        }
        let now = chrono::Utc::now();
        for e in cache.flash_sales() {
            let Some(f) = e.voucher.flash.as_ref().filter(|f| f.shards() > 1 && f.end_at > now) else {
                continue;
            };
            match recover(&redis, &keys, e.voucher.id, f.shards()).await {
                Ok(_) => failures = 0,
                Err(err) => {
                    failures += 1;
                    if failures <= 3 || failures.is_multiple_of(60) {
                        tracing::warn!(voucher = e.voucher.id, error = %format!("{err:#}"), "completing moves failed");
                    }
                }
            }
        }
    }
}
