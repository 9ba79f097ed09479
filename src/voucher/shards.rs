//! Sharded sales: one sale's stock and shopper marks over `stock_shards` hash tags,
//! the moves of units between them, and a consistent reading of all of them.
//!
//! A shopper always lands on the shard [`crate::keys::shard_of`] names, so the one
//! order per shopper stays one atomic script (`reserve.lua` on that shard). When the
//! shard runs dry while others still hold stock, [`crate::voucher::refill`] moves
//! units from the richest shard to it, in three idempotent steps on two slots:
//!
//! 1. `shard_give.lua` on the donor: stock − n, and the ledger entry
//!    `given[transfer] = "dest:n"` (the units are now in transit);
//! 2. `shard_take.lua` on the receiver: stock + n, and `transfer` in its `taken` set;
//! 3. `shard_done.lua` on the donor: the entry leaves `given` for `moved`.
//!
//! A process that dies between the steps leaves the entry in `given` (and in the
//! registry of moves under way); the recovery pass, and every refill before it calls
//! a sale sold out, takes it into its receiver (once: the `taken` set) and closes it.
//! A give retried with the same id finds its entry and gives nothing more; a take
//! retried finds its id taken. So units are never created or destroyed: at every
//! instant each is on sale in one shard, in one `given` entry not yet taken, or sold.
//!
//! Every give and take passes the caller's floor for its shard and refuses (closing
//! the shard) one that went back in time; a take refuses units given before a
//! repair of the sale (the receiver's generation is newer than the donor's when it
//! gave: the repair counted them from Postgres and cleared the ledgers,
//! [`crate::recovery`]).
use crate::keys::Keys;
use crate::recovery::{gen_of, Floors};
use crate::redis_conn::Conn;
use anyhow::{Context, Result};
use redis::Script;
use std::collections::HashMap;
use std::sync::LazyLock;

static GIVE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/shard_give.lua")));
static TAKE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/shard_take.lua")));
static DONE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/shard_done.lua")));

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

/// One read of every shard, each in one `MULTI` (a shard's keys share a slot).
async fn collect(conn: &mut Conn, keys: &Keys, voucher: i64, shards: u32) -> Result<Snapshot> {
    let reads = (0..shards).map(|k| {
        let mut conn = conn.clone();
        async move {
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
    });
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

/// One move of units between two shards of a sale: what each of its steps and its
/// entry in the registry of moves under way name it by.
#[derive(Clone, Copy, Debug)]
pub struct Move<'a> {
    pub voucher: i64,
    pub shards: u32,
    /// The donor.
    pub from: u32,
    /// The receiver.
    pub to: u32,
    /// The move's id, which makes each step idempotent.
    pub transfer: &'a str,
}

/// Step 1 on the donor: the units given (or < 0, see `lua/shard_give.lua`) and
/// the donor's sequence, which the take needs. The caller's floor for the donor is
/// passed and raised.
pub async fn give(conn: &mut Conn, keys: &Keys, floors: &Floors, mv: &Move<'_>, want: i64) -> Result<(i64, i64)> {
    let Move {
        voucher,
        shards,
        from,
        to,
        transfer,
    } = *mv;
    let tag = crate::keys::shard_tag(voucher, from, shards);
    let (n, seq): (i64, i64) = GIVE
        .key(keys.stock_at(voucher, from, shards))
        .key(keys.given_at(voucher, from, shards))
        .key(keys.moved_at(voucher, from, shards))
        .key(keys.seq_at(voucher, from, shards))
        .arg(transfer)
        .arg(to)
        .arg(want)
        .arg(floors.get(&tag))
        .invoke_async(conn)
        .await
        .context("shard_give.lua")?;
    if n != -4 {
        floors.raise(&tag, seq);
    }
    Ok((n, seq))
}

/// Step 2 on the receiver (see `lua/shard_take.lua`): `given_at` is the donor's
/// sequence when it gave.
pub async fn take(
    conn: &mut Conn,
    keys: &Keys,
    floors: &Floors,
    mv: &Move<'_>,
    units: i64,
    given_at: i64,
) -> Result<i64> {
    let Move {
        voucher,
        shards,
        to,
        transfer,
        ..
    } = *mv;
    let tag = crate::keys::shard_tag(voucher, to, shards);
    let (code, seq): (i64, i64) = TAKE
        .key(keys.stock_at(voucher, to, shards))
        .key(keys.taken_at(voucher, to, shards))
        .key(keys.seq_at(voucher, to, shards))
        .arg(transfer)
        .arg(units)
        .arg(floors.get(&tag))
        .arg(given_at)
        .invoke_async(conn)
        .await
        .context("shard_take.lua")?;
    if code != -4 {
        floors.raise(&tag, seq);
    }
    Ok(code)
}

/// Step 3 on the donor (see `lua/shard_done.lua`).
pub async fn done(conn: &mut Conn, keys: &Keys, mv: &Move<'_>) -> Result<()> {
    let Move {
        voucher,
        shards,
        from,
        transfer,
        ..
    } = *mv;
    let _: i64 = DONE
        .key(keys.given_at(voucher, from, shards))
        .key(keys.moved_at(voucher, from, shards))
        .arg(transfer)
        .invoke_async(conn)
        .await
        .context("shard_done.lua")?;
    Ok(())
}

/// Takes and closes the moves pending in `snap`. Returns how many it closed; an
/// entry whose receiver refuses (lost, behind, or rebuilt since) stays for the
/// repair.
pub async fn settle(
    conn: &mut Conn,
    keys: &Keys,
    floors: &Floors,
    voucher: i64,
    shards: u32,
    snap: &Snapshot,
) -> Result<usize> {
    let mut closed = 0;
    for p in &snap.pending {
        let given_at = snap.shards.get(p.from as usize).map_or(0, |s| s.seq);
        let mv = Move {
            voucher,
            shards,
            from: p.from,
            to: p.to,
            transfer: &p.transfer,
        };
        let r = take(conn, keys, floors, &mv, p.units, given_at).await?;
        if r < 0 {
            tracing::warn!(voucher, transfer = %p.transfer, code = r, "a move cannot be taken; left for the repair");
            continue;
        }
        done(conn, keys, &mv).await?;
        closed += 1;
    }
    Ok(closed)
}
