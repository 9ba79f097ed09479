//! Sharded sales: one sale's stock and shopper marks over `stock_shards` hash tags,
//! the moves of units between them, and a consistent reading of all of them.
//!
//! A shopper always lands on the shard [`crate::keys::shard_of`] names, so the one
//! order per shopper stays one atomic script (`reserve.lua` on that shard). When the
//! shard runs dry while others still hold stock, [`crate::sales::refill`] moves
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
//! Every give and take passes the caller's points of its shard's history and
//! refuses (closing the shard) one that went back in time; a take refuses units given before a
//! repair of the sale (the receiver's generation is newer than the donor's when it
//! gave: the repair counted them from Postgres and cleared the ledgers,
//! [`crate::recovery`]).
mod reading;

use crate::keys::Keys;
use crate::recovery::side::Side;
use crate::recovery::Recovery;
use crate::redis_conn::Conn;
use anyhow::{Context, Result};
use redis::Script;
use std::sync::LazyLock;

pub use reading::{snapshot, NoConsistentReading, Pending, ShardBooks, Snapshot};

static GIVE: LazyLock<Script> = LazyLock::new(|| Script::new(crate::shard_script!("shard_give")));
static TAKE: LazyLock<Script> = LazyLock::new(|| Script::new(crate::shard_script!("shard_take")));
static DONE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/shard_done.lua")));

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

/// Step 1 on the donor: the units given (or < 0, see `lua/shard_give.lua`), the
/// donor's sequence, which the take needs, and whether the replicas hold the give
/// (a side write, [`crate::recovery::side`]: not to be taken before they do).
pub async fn give(
    conn: &mut Conn,
    keys: &Keys,
    recovery: &Recovery,
    mv: &Move<'_>,
    want: i64,
) -> Result<(i64, i64, bool)> {
    let Move {
        voucher,
        shards,
        from,
        to,
        transfer,
    } = *mv;
    let tag = crate::keys::shard_tag(voucher, from, shards);
    let side = Side {
        tag: &tag,
        script: &GIVE,
        keys: vec![
            keys.stock_at(voucher, from, shards),
            keys.given_at(voucher, from, shards),
            keys.moved_at(voucher, from, shards),
            keys.seq_at(voucher, from, shards),
            keys.hist_at(voucher, from, shards),
        ],
        also: None,
        reads: crate::recovery::side::wrote_flag,
    };
    let w = recovery
        .side_write(conn, side, |call| {
            vec![
                transfer.as_bytes().to_vec(),
                to.to_string().into_bytes(),
                want.to_string().into_bytes(),
                call.seqs().into_bytes(),
                call.names(),
                call.name.to_vec(),
            ]
        })
        .await
        .context("shard_give.lua")?;
    Ok((w.code, w.seq, w.acked))
}

/// Step 2 on the receiver (see `lua/shard_take.lua`): `given_at` is the donor's
/// sequence when it gave. Its code, and whether the replicas hold the take (not
/// to be closed before they do).
pub async fn take(
    conn: &mut Conn,
    keys: &Keys,
    recovery: &Recovery,
    mv: &Move<'_>,
    units: i64,
    given_at: i64,
) -> Result<(i64, bool)> {
    let Move {
        voucher,
        shards,
        to,
        transfer,
        ..
    } = *mv;
    let tag = crate::keys::shard_tag(voucher, to, shards);
    let side = Side {
        tag: &tag,
        script: &TAKE,
        keys: vec![
            keys.stock_at(voucher, to, shards),
            keys.taken_at(voucher, to, shards),
            keys.seq_at(voucher, to, shards),
            keys.hist_at(voucher, to, shards),
        ],
        also: None,
        reads: crate::recovery::side::wrote_on_one,
    };
    let w = recovery
        .side_write(conn, side, |call| {
            vec![
                transfer.as_bytes().to_vec(),
                units.to_string().into_bytes(),
                call.seqs().into_bytes(),
                call.names(),
                given_at.to_string().into_bytes(),
                call.name.to_vec(),
            ]
        })
        .await
        .context("shard_take.lua")?;
    Ok((w.code, w.acked))
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

/// Takes and closes the moves pending in `snap`. Returns the transfers it closed;
/// an entry whose receiver refuses (lost, behind, or rebuilt since) stays for the
/// repair, one whose take is short of its replicas for a later replay.
pub async fn settle(
    conn: &mut Conn,
    keys: &Keys,
    recovery: &Recovery,
    voucher: i64,
    shards: u32,
    snap: &Snapshot,
) -> Result<Vec<String>> {
    let mut closed = Vec::new();
    for p in &snap.pending {
        let given_at = snap.shards.get(p.from as usize).map_or(0, |s| s.seq);
        let mv = Move {
            voucher,
            shards,
            from: p.from,
            to: p.to,
            transfer: &p.transfer,
        };
        if recovery.waits_for_replicas() {
            // The give again (it gives nothing more: the entry names its units),
            // to learn that the donor's replicas hold it before its units are
            // taken: a give a failover loses must not have been taken.
            let (n, _, acked) = give(conn, keys, recovery, &mv, p.units).await?;
            if n <= 0 || !acked {
                continue;
            }
        }
        let (r, acked) = take(conn, keys, recovery, &mv, p.units, given_at).await?;
        if r < 0 {
            tracing::warn!(voucher, transfer = %p.transfer, code = r, "a move cannot be taken; left for the repair");
            continue;
        }
        if !acked {
            // Not closed before the replicas hold the take: replayed later.
            continue;
        }
        done(conn, keys, &mv).await?;
        closed.push(p.transfer.clone());
    }
    Ok(closed)
}
