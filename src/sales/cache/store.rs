//! [`VoucherCache`]: the map of entries, its puts, its reload from Postgres (which
//! keeps what was put meanwhile), its pause check and the events it applies.
use super::entry::Entry;
use super::missing;
use crate::sales::model::Voucher;
use crate::sales::repo;
use crate::sales::stock::Event;
use anyhow::{Context, Result};
use sqlx::PgPool;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

#[derive(Default)]
pub struct VoucherCache {
    map: RwLock<HashMap<i64, Arc<Entry>>>,
    /// Puts so far: a reload keeps what was put after it read Postgres.
    pub(super) puts: AtomicU64,
    /// Ids Postgres had no voucher for, lately (none kept by default: see
    /// [`VoucherCache::new`]).
    missing: missing::Missing,
}

impl VoucherCache {
    /// A cache that remembers for `missing_ttl` that an id has no voucher.
    pub fn new(missing_ttl: Duration) -> Self {
        Self {
            missing: missing::Missing::new(missing_ttl),
            ..Self::default()
        }
    }

    /// Whether Postgres said lately that there is no voucher `id`.
    pub fn known_missing(&self, id: i64) -> bool {
        self.missing.contains(id)
    }

    /// What to hand [`VoucherCache::note_missing`] after a read of Postgres begun now.
    pub fn read_marker(&self) -> u64 {
        self.puts.load(Ordering::Acquire)
    }

    /// Postgres, read from `marker` on, has no voucher `id`: remembered unless a
    /// voucher was put since (it may be this one).
    pub fn note_missing(&self, id: i64, marker: u64) {
        // Under the map's lock, which `put` holds while it counts and removes.
        let _map = self.map.read().expect("cache poisoned");
        if self.puts.load(Ordering::Acquire) == marker {
            self.missing.insert(id);
        }
    }

    pub fn get(&self, id: i64) -> Option<Arc<Entry>> {
        self.map.read().expect("cache poisoned").get(&id).cloned()
    }

    /// Every flash-sale voucher (the relay reads their outboxes).
    pub fn flash_sales(&self) -> Vec<Arc<Entry>> {
        let map = self.map.read().expect("cache poisoned");
        map.values().filter(|e| e.voucher.is_flash_sale()).cloned().collect()
    }

    /// Inserts or replaces one voucher; a replaced entry starts with no sold-out flag.
    pub fn put(&self, voucher: Voucher) {
        let mut map = self.map.write().expect("cache poisoned");
        let entry = Arc::new(Entry {
            put_at: self.puts.fetch_add(1, Ordering::AcqRel) + 1,
            ..Entry::new(voucher)
        });
        self.missing.remove(entry.voucher.id);
        map.insert(entry.voucher.id, entry);
    }

    pub fn stock_returned(&self, id: i64) {
        if let Some(e) = self.get(id) {
            e.stock_returned();
        }
    }

    /// Replaces the whole cache from Postgres. Unchanged vouchers keep their entry
    /// (and flag) unless `clear_flags`.
    ///
    /// A voucher put while Postgres was being read (a voucher just created, its
    /// pause) is newer than what the read returned: it stays as it was put. Without
    /// this a voucher created during a reload vanished from the cache until its
    /// event was applied, and its first orders got 404.
    pub async fn reload(&self, pg: &PgPool, clear_flags: bool) -> Result<usize> {
        let read_at = self.puts.load(Ordering::Acquire);
        let all = repo::all(pg).await.context("loading vouchers into the cache")?;
        Ok(self.install(all, read_at, clear_flags))
    }

    /// Installs `all`, read from Postgres when the cache had seen `read_at` puts.
    pub(super) fn install(&self, all: Vec<Voucher>, read_at: u64, clear_flags: bool) -> usize {
        let mut map = self.map.write().expect("cache poisoned");
        // Events may have been lost: an id remembered missing may exist now. It
        // shows anyway (a lookup reads the map first); its entry goes. The ids not
        // read stay remembered: a reload at start or every REFRESH_EVERY must not
        // send a scanner's ids back to Postgres.
        self.missing.forget(all.iter().map(|v| v.id));
        let mut fresh: HashMap<i64, Arc<Entry>> = map
            .iter()
            .filter(|(_, e)| e.put_at > read_at)
            .map(|(id, e)| (*id, e.clone()))
            .collect();
        for v in all {
            if fresh.contains_key(&v.id) {
                continue;
            }
            let entry = match map.remove(&v.id) {
                Some(old) if old.voucher == v => {
                    if clear_flags {
                        old.stock_returned();
                    }
                    old
                }
                other => {
                    let entry = Entry::new(v);
                    // The sold-out flag is about the stock in Redis, not about the
                    // row, which changes as orders persist (its stock falls): a
                    // changed row keeps the flag, trusted for SOLD_OUT_TTL at most as
                    // always. Without this, a reload during a sold-out crowd let a
                    // whole burst through to Redis.
                    if let Some(old) = other.filter(|_| !clear_flags) {
                        entry.state.store(old.state.load(Ordering::Acquire), Ordering::Release);
                    }
                    Arc::new(entry)
                }
            };
            fresh.insert(entry.voucher.id, entry);
        }
        *map = fresh;
        map.len()
    }

    /// Reloads every voucher whose `paused` differs from Postgres's (the paused
    /// ids are read first, then each voucher that disagrees is read again, so a
    /// change racing this check is never undone). Returns how many it reloaded.
    pub async fn sync_pauses(&self, pg: &PgPool) -> Result<usize> {
        let paused: HashSet<i64> = repo::paused_ids(pg)
            .await
            .context("reading the paused sales")?
            .into_iter()
            .collect();
        let stale: Vec<i64> = {
            let map = self.map.read().expect("cache poisoned");
            let wrongly_running = paused
                .iter()
                .filter(|id| map.get(id).is_some_and(|e| !e.voucher.paused));
            let wrongly_paused = map
                .values()
                .filter(|e| e.voucher.paused && !paused.contains(&e.voucher.id))
                .map(|e| &e.voucher.id);
            wrongly_running.chain(wrongly_paused).copied().collect()
        };
        for &id in &stale {
            if let Some(v) = repo::get(pg, id).await.context("reloading a voucher")? {
                self.put(v);
            }
        }
        Ok(stale.len())
    }

    pub(super) async fn apply(&self, pg: &PgPool, event: Event) -> Result<()> {
        match event {
            Event::Voucher(id) => {
                if let Some(v) = repo::get(pg, id).await? {
                    self.put(v);
                }
            }
            Event::Stock(id) => self.stock_returned(id),
        }
        Ok(())
    }
}
