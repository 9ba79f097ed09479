//! What this process knows each shard held: the highest sequence it has seen per
//! shard (from its own scripts' replies, the outbox entries its relay read, and
//! what Postgres recorded: the relays' floors and each sale's generation). Every
//! write script gets its shard's floor and refuses (closing the shard) when the
//! shard is below it.
use anyhow::{Context, Result};
use sqlx::PgPool;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};

/// The high part of a sequence: a shard's sequence is `gen * GEN + writes`.
pub const GEN: i64 = 1 << 32;

/// The generation of a sequence.
pub fn gen_of(seq: i64) -> i64 {
    seq.div_euclid(GEN)
}

/// One process's floors, by shard hash tag.
#[derive(Default)]
pub struct Floors {
    map: RwLock<HashMap<Arc<str>, Arc<AtomicI64>>>,
}

impl Floors {
    /// The floor cell of shard `tag` (made at 0 on first use): a gate keeps it and
    /// reads and raises it without the map.
    pub fn cell(&self, tag: &Arc<str>) -> Arc<AtomicI64> {
        if let Some(c) = self.map.read().expect("floors poisoned").get(tag) {
            return c.clone();
        }
        self.map
            .write()
            .expect("floors poisoned")
            .entry(tag.clone())
            .or_default()
            .clone()
    }

    /// The floor of shard `tag` (0 if nothing was seen of it).
    pub fn get(&self, tag: &str) -> i64 {
        self.map
            .read()
            .expect("floors poisoned")
            .get(tag)
            .map_or(0, |c| c.load(Ordering::Acquire))
    }

    /// Raises the floor of shard `tag` to `seq` (never lowers it).
    pub fn raise(&self, tag: &str, seq: i64) {
        if let Some(c) = self.map.read().expect("floors poisoned").get(tag) {
            c.fetch_max(seq, Ordering::AcqRel);
            return;
        }
        self.cell(&Arc::from(tag)).fetch_max(seq, Ordering::AcqRel);
    }

    /// Raises the floors of the shards `tags` to what Postgres recorded for them (the
    /// relays' floors, written with their intents: `outbox::relay::intent`).
    pub async fn refresh(&self, pg: &PgPool, namespace: &str, tags: &[String]) -> Result<()> {
        if tags.is_empty() {
            return Ok(());
        }
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT tag, seq FROM shard_floors WHERE namespace = $1 AND tag = ANY($2)")
                .bind(namespace)
                .bind(tags)
                .fetch_all(pg)
                .await
                .context("reading the shards' floors")?;
        for (tag, seq) in rows {
            self.raise(&tag, seq);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_only_rise() {
        let f = Floors::default();
        assert_eq!(f.get("v1"), 0);
        f.raise("v1", 5);
        f.raise("v1", 3);
        assert_eq!(f.get("v1"), 5);
        let cell = f.cell(&Arc::from("v1"));
        cell.fetch_max(9, Ordering::AcqRel);
        assert_eq!(f.get("v1"), 9);
        assert_eq!(gen_of(3 * GEN + 7), 3);
        assert_eq!(gen_of(7), 0);
    }
}
