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

    /// Raises the floors from what Postgres recorded for the shards `tags` (the
    /// relays' floors), and every shard of each sale in `gens` to its generation.
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

/// Records the highest sequence of each shard in `seen` as its floor in Postgres
/// (in the caller's transaction or statement's connection); only raises.
pub async fn record(db: impl sqlx::PgExecutor<'_>, namespace: &str, seen: &[(String, i64)]) -> Result<()> {
    if seen.is_empty() {
        return Ok(());
    }
    let (tags, seqs): (Vec<&str>, Vec<i64>) = seen.iter().map(|(t, s)| (t.as_str(), *s)).unzip();
    sqlx::query(
        "INSERT INTO shard_floors (namespace, tag, seq)
         SELECT $1, t, max(s) FROM unnest($2::text[], $3::bigint[]) AS x(t, s) GROUP BY t
         ON CONFLICT (namespace, tag) DO UPDATE SET seq = GREATEST(shard_floors.seq, EXCLUDED.seq)",
    )
    .bind(namespace)
    .bind(&tags)
    .bind(&seqs)
    .execute(db)
    .await
    .context("recording the shards' floors")?;
    Ok(())
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
