//! A consistent reading of every shard of a sharded sale ([`snapshot`]): what each
//! shard holds, and the units given by one and not yet taken by another.
use crate::keys::Keys;
use crate::recovery::gen_of;
use crate::redis_conn::Conn;
use anyhow::{Context, Result};
use std::collections::HashMap;

/// How many times a snapshot is read again to find two consecutive reads that
/// agree on every move (see [`snapshot`]).
const SNAPSHOT_TRIES: usize = 8;

/// A sale's shards moved units through every read of a snapshot: their stock is
/// unknown for now (answered 503, worth retrying).
#[derive(Debug, thiserror::Error)]
#[error("units kept moving between the sale's shards: no consistent reading of them")]
pub struct NoConsistentReading;

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
    /// Orders the shard admitted: its `admitted` counter, plus the index an older
    /// version kept ([`crate::keys::Keys::orders`]).
    pub orders: i64,
    pub returned: i64,
    pub outbox: i64,
    /// Gives this shard ever made: its `given` entries plus its `moved` set (a close
    /// moves an entry from one to the other). Only grows, but for a repair.
    gives: i64,
    /// The size of the shard's `taken` set (it only grows, but for a repair).
    taken: i64,
    /// The shard's sequence (0 if it has none yet).
    pub seq: i64,
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

    /// Per shard, what every give and take grows: gives made, moves taken, and the
    /// generation (a repair clears the ledgers, so it would shrink the others).
    /// None of them ever returns to an earlier value, unlike the `given` hash
    /// ({} -> {t} -> {} across one move).
    fn counters(&self) -> Vec<(i64, i64, i64)> {
        self.shards.iter().map(|s| (s.gives, s.taken, gen_of(s.seq))).collect()
    }
}

/// One shard's books as one `MULTI` reads them (see [`read_shard`]): stock,
/// `given` entries, `taken` size, `admitted`, the old index's size, `returned`
/// size, outbox length, `moved` size, sequence.
type Reply = (
    Option<i64>,
    HashMap<String, String>,
    i64,
    Option<i64>,
    i64,
    i64,
    i64,
    i64,
    Option<i64>,
);

/// One read of shard `k` in one `MULTI` (its keys share a slot), on `conn`, a
/// clone of the caller's connection.
async fn read_shard(mut conn: Conn, keys: &Keys, voucher: i64, k: u32, shards: u32) -> Result<Reply> {
    let r: Reply = redis::pipe()
        .atomic()
        .get(keys.stock_at(voucher, k, shards))
        .hgetall(keys.given_at(voucher, k, shards))
        .scard(keys.taken_at(voucher, k, shards))
        .get(keys.admitted_at(voucher, k, shards))
        .hlen(keys.orders_at(voucher, k, shards))
        .scard(keys.returned_at(voucher, k, shards))
        .cmd("XLEN")
        .arg(keys.outbox_at(voucher, k, shards))
        .scard(keys.moved_at(voucher, k, shards))
        .get(keys.seq_at(voucher, k, shards))
        .query_async(&mut conn)
        .await
        .with_context(|| format!("reading shard {k} of sale {voucher}"))?;
    anyhow::Ok(r)
}

/// One read of every shard, each in one `MULTI` (a shard's keys share a slot).
async fn collect(conn: &mut Conn, keys: &Keys, voucher: i64, shards: u32) -> Result<Snapshot> {
    let reads = (0..shards).map(|k| read_shard(conn.clone(), keys, voucher, k, shards));
    let replies = futures::future::try_join_all(reads).await?;
    let mut snap = Snapshot::default();
    for (k, (stock, given, taken, admitted, indexed, returned, outbox, moved, seq)) in replies.into_iter().enumerate() {
        // The counter, plus the index an older version kept (see `Keys::orders`).
        let orders = admitted.unwrap_or(0) + indexed;
        let gives = given.len() as i64 + moved;
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
            gives,
            taken,
            seq: seq.unwrap_or(0),
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

/// Every shard of a sale as at one instant, or None if no such reading could be
/// made in [`SNAPSHOT_TRIES`] reads (moves all the while): the caller must then
/// treat the sale's stock as unknown, never as sold out.
///
/// Reads until two consecutive reads agree on every shard's move counters (see
/// [`Snapshot::counters`]). Each counter only grows, and every give or take grows
/// one, so equal counters in two reads mean no give or take happened on any shard
/// between its read in the first and its read in the second. The first read, then,
/// is what every shard held at one instant between the two (as far as moves go:
/// including which of its ledger entries were taken, read after its `MULTI`s and
/// before the second read), and counts each unit once. A close (`shard_done.lua`)
/// changes no count: it only moves a taken entry out of `given`. Orders and returns
/// change one shard at a time, atomically, so they need no such care.
pub async fn snapshot(conn: &mut Conn, keys: &Keys, voucher: i64, shards: u32) -> Result<Option<Snapshot>> {
    let shards = shards.max(1);
    let mut last = collect(conn, keys, voucher, shards).await?;
    if shards <= 1 {
        return Ok(Some(last));
    }
    for _ in 1..SNAPSHOT_TRIES {
        let next = collect(conn, keys, voucher, shards).await?;
        if next.counters() == last.counters() {
            return Ok(Some(last));
        }
        last = next;
    }
    Ok(None)
}
