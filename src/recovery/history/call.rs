//! One call of a script on a shard, as [`super`] sees it.
use super::point::{fresh_name, Name, Point, Snapshot};
use super::shard::ShardHistory;
use std::sync::Arc;

/// One call of a script on a shard: the points it passes (this process's for the
/// shard, and any the caller adds) and the name its write will bear.
pub struct Call {
    pub snap: Snapshot,
    pub name: Name,
    shard: Arc<ShardHistory>,
}

impl Call {
    /// A call with `shard`'s points now and a fresh name.
    pub fn on(shard: Arc<ShardHistory>) -> Self {
        Self {
            snap: shard.snapshot(),
            name: fresh_name(),
            shard,
        }
    }

    /// Passes `p` as well (e.g. the sale's generation, as a count).
    pub fn and(mut self, p: Point) -> Self {
        if !self.snap.points.contains(&p) {
            self.snap.points.push(p);
        }
        self
    }

    /// The points' sequences, as the scripts take them.
    pub fn seqs(&self) -> String {
        self.snap.seqs()
    }

    /// The points' names, as the scripts take them.
    pub fn names(&self) -> Vec<u8> {
        self.snap.names()
    }

    /// The script found every point held and left the shard at `seq`, having
    /// written (its write bears [`Call::name`]) or not. Returns the call's point.
    pub fn passed(&self, seq: i64, wrote: bool) -> Point {
        self.shard.passed(&self.snap, seq, wrote.then_some(self.name));
        match wrote {
            true => Point { seq, name: self.name },
            false => self.snap.latest().unwrap_or(Point::count(seq)),
        }
    }

    /// The shard this call is on.
    pub fn shard(&self) -> &Arc<ShardHistory> {
        &self.shard
    }
}
