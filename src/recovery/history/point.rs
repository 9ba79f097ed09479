//! The values of a shard's history: a write's name, a point, the points one call
//! passes, and the scripts' text.

/// The high part of a sequence: a shard's sequence is `gen * GEN + writes`.
pub const GEN: i64 = 1 << 32;

/// The generation of a sequence.
pub fn gen_of(seq: i64) -> i64 {
    seq.div_euclid(GEN)
}

/// The name of one write: 8 bytes its writer drew, never all zero.
pub type Name = [u8; 8];

/// The name of no write: a point bearing it is a count (see [`Point::count`]).
pub const NO_NAME: Name = [0; 8];

/// A fresh name for a write.
pub fn fresh_name() -> Name {
    loop {
        let n: u64 = rand::random();
        if n != 0 {
            return n.to_be_bytes();
        }
    }
}

/// The text of a script that writes or reads a shard's history: `lua/history.lua`
/// (the check of a caller's points and the naming of a write), then the script's
/// own text, `lua/<name>.lua`.
#[macro_export]
macro_rules! shard_script {
    ($name:literal) => {
        concat!(
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/lua/history.lua")),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/lua/", $name, ".lua"))
        )
    };
}

/// A point of a shard's history: write `seq` bore `name`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Point {
    pub seq: i64,
    pub name: Name,
}

impl Point {
    /// A point that only counts: held while the shard's sequence is at least `seq`
    /// (what a floor of a version before names was, and a generation's start).
    pub fn count(seq: i64) -> Self {
        Self { seq, name: NO_NAME }
    }

    /// The start of generation `gen` (a repair's, or a new sale's 0).
    pub fn gen_start(gen: i64) -> Self {
        Self::count(gen * GEN)
    }

    /// The point's generation.
    pub fn gen(&self) -> i64 {
        gen_of(self.seq)
    }

    /// A point from a sequence and a name as Postgres or an outbox entry holds it
    /// (a name that is not 8 bytes, or none: a count).
    pub fn from_parts(seq: i64, name: Option<&[u8]>) -> Self {
        let name = name.and_then(|n| <Name>::try_from(n).ok()).unwrap_or(NO_NAME);
        Self { seq, name }
    }
}

/// The points one call passes to its script, as it took them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub points: Vec<Point>,
}

impl Snapshot {
    /// The points' sequences, as the scripts take them ("s1,s2,...").
    pub fn seqs(&self) -> String {
        use std::fmt::Write;
        let mut s = String::with_capacity(12 * self.points.len());
        for (i, p) in self.points.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(s, "{}", p.seq);
        }
        s
    }

    /// The points' names, 8 bytes each, in the same order.
    pub fn names(&self) -> Vec<u8> {
        self.points.iter().flat_map(|p| p.name).collect()
    }

    /// The latest of the points: once a script found every point held, the others
    /// are all before it.
    pub fn latest(&self) -> Option<Point> {
        self.points.iter().copied().max_by_key(|p| p.seq)
    }
}
