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
mod reading;

use crate::keys::Keys;
use crate::recovery::Floors;
use crate::redis_conn::Conn;
use anyhow::{Context, Result};
use redis::Script;
use std::sync::LazyLock;

pub use reading::{snapshot, NoConsistentReading, Pending, ShardBooks, Snapshot};

static GIVE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/shard_give.lua")));
static TAKE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/shard_take.lua")));
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
