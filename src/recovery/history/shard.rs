//! One shard's points in this process ([`ShardHistory`]), and every shard's
//! ([`Histories`]).
use super::point::{gen_of, Name, Point, Snapshot};
use sqlx::PgPool;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

/// The most points learnt and not checked yet kept per shard; past it the
/// earliest is dropped (it is before the others but for a history gone back, which
/// the later ones catch as well).
pub(super) const MAX_UNCHECKED: usize = 64;
/// The most points learnt from Postgres remembered per shard, so that the same
/// point is not checked again every refresh.
const MAX_LEARNT: usize = 256;
/// The most acknowledged orders a shard's log keeps of this process's latest
/// writes on it (see [`ShardHistory::remember`]).
pub const LOG: usize = 4096;

#[derive(Default)]
struct Seen {
    head: Option<Point>,
    unchecked: Vec<Point>,
    learnt: HashSet<Point>,
}

/// One shard's points in this process.
#[derive(Default)]
pub struct ShardHistory {
    seen: Mutex<Seen>,
    /// Held by a write of this process that records its point in Postgres (a
    /// return, a top-up, a move), so that each such write checks the point the one
    /// before it recorded: the points recorded under one writer's row form one
    /// history (see [`record`]).
    side: tokio::sync::Mutex<()>,
    /// The orders this process acknowledged in its latest writes of the shard, at
    /// most [`LOG`]: should the shard be found to have gone back in time, they go
    /// to the recovery desk (`crate::recovery::rescue`).
    log: Mutex<Log>,
}

/// A shard's log: orders of one generation only, the newest this process knows
/// of; those of an older one are handed out as soon as a newer one is known (a
/// repair since their write: perhaps it did not count them).
#[derive(Default)]
struct Log {
    gen: i64,
    orders: std::collections::VecDeque<crate::ordering::OrderMsg>,
}

impl Log {
    /// Moves the log to generation `gen` (if newer): the orders of the older one, out.
    fn move_to_gen(&mut self, gen: i64) -> Vec<crate::ordering::OrderMsg> {
        if gen <= self.gen {
            return Vec::new();
        }
        self.gen = gen;
        self.orders.drain(..).collect()
    }
}

impl ShardHistory {
    /// Keeps the orders a write at `seq` of this process admitted and
    /// acknowledged. Returns the orders of a generation older than the newest this
    /// shard knows of (a repair since their write: perhaps it did not count them,
    /// the recovery desk finds out): the log's earlier ones when `seq` is of a
    /// newer generation, these themselves when their call came back after a
    /// repair this process already knows of.
    pub fn remember(
        &self,
        seq: i64,
        orders: impl IntoIterator<Item = crate::ordering::OrderMsg>,
    ) -> Vec<crate::ordering::OrderMsg> {
        let known = self.head().map_or(0, |p| p.gen());
        let gen = gen_of(seq);
        let mut log = self.log.lock().expect("log poisoned");
        let mut older = log.move_to_gen(gen.max(known));
        if gen < log.gen {
            older.extend(orders);
            return older;
        }
        log.orders.extend(orders);
        while log.orders.len() > LOG {
            log.orders.pop_front();
        }
        older
    }

    /// Takes every order of the log (its shard is found gone back in time, or
    /// closed for a repair).
    pub fn take_log(&self) -> Vec<crate::ordering::OrderMsg> {
        self.log.lock().expect("log poisoned").orders.drain(..).collect()
    }

    /// How many orders the log holds.
    pub fn logged(&self) -> usize {
        self.log.lock().expect("log poisoned").orders.len()
    }

    /// The points a call passes now: the head and those not checked yet.
    pub fn snapshot(&self) -> Snapshot {
        let s = self.seen.lock().expect("history poisoned");
        let mut points = Vec::with_capacity(1 + s.unchecked.len());
        points.extend(s.head);
        points.extend_from_slice(&s.unchecked);
        Snapshot { points }
    }

    /// A call found every point of `snap` held and left the shard at `seq`; `wrote`
    /// is the name its write at `seq` bears, if it wrote. Its point (its write, or
    /// the latest of `snap`) follows every point of `snap`: it replaces the head if
    /// the head was among them, else it waits to be checked as well (another call
    /// moved the head meanwhile, perhaps on another history).
    pub fn passed(&self, snap: &Snapshot, seq: i64, wrote: Option<Name>) {
        let mut result = match wrote {
            Some(name) => Some(Point { seq, name }),
            None => snap.latest(),
        };
        // The shard is of a newer generation than any point passed: a repair since.
        if result.is_none_or(|p| p.gen() < gen_of(seq)) {
            result = Some(Point::gen_start(gen_of(seq)));
        }
        let Some(result) = result else { return };
        let mut s = self.seen.lock().expect("history poisoned");
        s.unchecked.retain(|p| !snap.points.contains(p));
        match s.head {
            Some(h) if !snap.points.contains(&h) && h != result => {
                if !s.unchecked.contains(&result) {
                    s.unchecked.push(result);
                }
            }
            _ => s.head = Some(result),
        }
        trim(&mut s);
    }

    /// A point learnt without a call of this process (an entry its relay read, a
    /// point Postgres recorded): every later call checks it. False if it was
    /// learnt before or is the head.
    pub fn learn(&self, p: Point) -> bool {
        let mut s = self.seen.lock().expect("history poisoned");
        if s.head == Some(p) || s.unchecked.contains(&p) || s.learnt.contains(&p) {
            return false;
        }
        if s.head.is_some_and(|h| p.gen() < h.gen()) {
            // Before a repair this process knows of: nothing to check.
            return false;
        }
        if s.learnt.len() >= MAX_LEARNT {
            s.learnt.clear();
        }
        s.learnt.insert(p);
        match s.head {
            None => s.head = Some(p),
            Some(_) => s.unchecked.push(p),
        }
        trim(&mut s);
        true
    }

    /// The sale is at generation `gen` (Postgres says): points of older
    /// generations are moot. Returns the log's orders of an older generation (a
    /// call that came back with them when no later call followed): they go to the
    /// recovery desk, as [`ShardHistory::remember`]'s.
    #[must_use = "the orders returned go to the recovery desk"]
    pub fn raise_gen(&self, gen: i64) -> Vec<crate::ordering::OrderMsg> {
        {
            let mut s = self.seen.lock().expect("history poisoned");
            if s.head.is_none_or(|h| h.gen() < gen) {
                s.head = Some(Point::gen_start(gen));
            }
            s.unchecked.retain(|p| p.gen() >= gen);
        }
        self.log.lock().expect("log poisoned").move_to_gen(gen)
    }

    /// The head (None before any call or point).
    pub fn head(&self) -> Option<Point> {
        self.seen.lock().expect("history poisoned").head
    }

    /// Serializes this process's writes on the shard that record their point in
    /// Postgres (see [`ShardHistory::side`]).
    pub async fn side(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.side.lock().await
    }
}

fn trim(s: &mut Seen) {
    if let Some(h) = s.head {
        s.unchecked.retain(|p| p.gen() >= h.gen());
    }
    while s.unchecked.len() > MAX_UNCHECKED {
        let earliest = (0..s.unchecked.len())
            .min_by_key(|&i| s.unchecked[i].seq)
            .expect("not empty");
        s.unchecked.swap_remove(earliest);
    }
}

/// This process's points, by shard hash tag.
#[derive(Default)]
pub struct Histories {
    map: RwLock<HashMap<Arc<str>, Arc<ShardHistory>>>,
}

impl Histories {
    /// The shards of `voucher`'s sale this process knows, by tag.
    pub fn of_sale(&self, voucher: i64) -> Vec<(Arc<str>, Arc<ShardHistory>)> {
        let (exact, prefix) = (format!("v{voucher}"), format!("v{voucher}."));
        self.map
            .read()
            .expect("histories poisoned")
            .iter()
            .filter(|(t, _)| &***t == exact.as_str() || t.starts_with(&prefix))
            .map(|(t, h)| (t.clone(), h.clone()))
            .collect()
    }

    /// Shard `tag`'s points (made empty on first use): a gate keeps them.
    pub fn shard(&self, tag: &str) -> Arc<ShardHistory> {
        if let Some(h) = self.map.read().expect("histories poisoned").get(tag) {
            return h.clone();
        }
        self.map
            .write()
            .expect("histories poisoned")
            .entry(Arc::from(tag))
            .or_default()
            .clone()
    }

    /// Learns the points Postgres recorded for the shards `tags` (the relays' and
    /// the other writers' rows, see [`record`]; the floors of versions before names,
    /// as counts).
    pub async fn refresh(&self, pg: &PgPool, namespace: &str, tags: &[String]) -> anyhow::Result<()> {
        use anyhow::Context;
        if tags.is_empty() {
            return Ok(());
        }
        let rows: Vec<(String, i64, Option<Vec<u8>>)> = sqlx::query_as(
            "SELECT tag, seq, name FROM shard_points WHERE namespace = $1 AND tag = ANY($2)
             UNION ALL
             SELECT tag, seq, NULL FROM shard_floors WHERE namespace = $1 AND tag = ANY($2)",
        )
        .bind(namespace)
        .bind(tags)
        .fetch_all(pg)
        .await
        .context("reading the shards' recorded points")?;
        for (tag, seq, name) in rows {
            self.shard(&tag).learn(Point::from_parts(seq, name.as_deref()));
        }
        Ok(())
    }
}
