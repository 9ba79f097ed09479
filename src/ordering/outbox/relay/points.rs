//! The points of the shards' histories a relay reads (each outbox entry names the
//! write that made it, `crate::recovery::history`), checked before they are
//! recorded.
//!
//! A relay records, with each intent, its latest point of every shard it read
//! (`shard_points`, one row per relay and shard), for every process to check. A
//! row stands for every point before it only if they are of one history: so each
//! round checks, in one step on the shard (`lua/shard_read.lua`), that the shard
//! still holds both the point this relay recorded last and the latest it read
//! now. A shard that holds only one of them went back in time between two reads
//! (the read entries are real orders all the same, published as any): the relay
//! asks for its sale's repair and records nothing of it this round, so that the
//! point Postgres holds, which the shard lost, stays for everyone to catch.
use super::Relay;
use crate::recovery::history::{read_shard, Snapshot};
use crate::recovery::Point;
use crate::redis_conn::Conn;
use std::collections::HashMap;

impl Relay {
    /// The points of `seen` (the latest read per shard) to record: those whose
    /// shard still holds them and the point recorded before.
    pub(super) async fn checked(&self, conn: &mut Conn, seen: HashMap<String, Point>) -> Vec<(String, Point)> {
        let before = self.memory.recorded.lock().expect("recorded poisoned").clone();
        let mut out = Vec::with_capacity(seen.len());
        for (tag, p) in seen {
            let Some(voucher) = voucher_of_tag(&tag) else {
                continue;
            };
            let mut snap = Snapshot { points: vec![p] };
            snap.points.extend(before.get(&tag).copied());
            match read_shard(conn, &self.keys, &tag, &snap, None).await {
                Ok(read) if read.lost => self.recovery.lost(
                    voucher,
                    "a shard went back in time (the relay found it no longer holds what it read)",
                ),
                Ok(_) => out.push((tag, p)),
                // Unchecked this round: not recorded (the orders are published all
                // the same).
                Err(e) => tracing::debug!(shard = %tag, error = %format!("{e:#}"), "checking a shard's points failed"),
            }
        }
        out
    }

    /// `points` are recorded with an intent: this relay's latest, and points every
    /// later call of this process on those shards checks.
    pub(super) fn recorded(&self, points: &[(String, Point)]) {
        let mut recorded = self.memory.recorded.lock().expect("recorded poisoned");
        for (tag, p) in points {
            let r = recorded.entry(tag.clone()).or_insert(*p);
            if p.seq > r.seq {
                *r = *p;
            }
            self.recovery.histories.shard(tag).learn(*p);
        }
    }
}

/// The sale of a shard's hash tag (`v<id>` or `v<id>.<k>.<salt>`).
fn voucher_of_tag(tag: &str) -> Option<i64> {
    tag.strip_prefix('v')?.split('.').next()?.parse().ok()
}
