//! The in-process voucher cache the order path reads instead of Postgres.
//!
//! It holds every voucher. Admin changes reach every instance through a Redis
//! pub/sub channel (`<ns>:events`); a full reload runs at start, after the
//! subscription reconnects (messages may have been missed), and every
//! `REFRESH_EVERY` as a backstop.
//!
//! Each entry also carries the local sold-out flag: once Redis answered "sold out",
//! this instance refuses further orders without a Redis call until a stock event
//! arrives. The flag and an event generation share one atomic word, so a sold-out
//! answer that raced with a top-up cannot set the flag after the top-up cleared it.
use super::model::Voucher;
use super::repo;
use super::stock::Event;
use crate::keys::Keys;
use crate::redis_conn::Redis;
use anyhow::{Context, Result};
use futures::StreamExt;
use sqlx::PgPool;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const REFRESH_EVERY: Duration = Duration::from_secs(30);

pub struct Entry {
    pub voucher: Voucher,
    /// (generation << 1) | sold_out
    state: AtomicU64,
}

/// What [`Entry::observe`] saw before a Redis call, to report "sold out" against.
#[derive(Clone, Copy)]
pub struct Observed(u64);

impl Entry {
    fn new(voucher: Voucher) -> Self {
        Self {
            voucher,
            state: AtomicU64::new(0),
        }
    }

    /// Whether this instance already knows the sale is sold out.
    pub fn observe(&self) -> (bool, Observed) {
        let s = self.state.load(Ordering::Acquire);
        (s & 1 == 1, Observed(s))
    }

    /// Records "sold out" unless stock came back since `seen`.
    pub fn mark_sold_out(&self, seen: Observed) {
        let _ = self
            .state
            .compare_exchange(seen.0, seen.0 | 1, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// Stock came back: clear the flag and start a new generation.
    pub fn stock_returned(&self) {
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| Some(((s >> 1) + 1) << 1));
    }
}

#[derive(Default)]
pub struct VoucherCache {
    map: RwLock<HashMap<i64, Arc<Entry>>>,
}

impl VoucherCache {
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
        let entry = Arc::new(Entry::new(voucher));
        self.map
            .write()
            .expect("cache poisoned")
            .insert(entry.voucher.id, entry);
    }

    pub fn stock_returned(&self, id: i64) {
        if let Some(e) = self.get(id) {
            e.stock_returned();
        }
    }

    /// Replaces the whole cache from Postgres. Unchanged vouchers keep their entry
    /// (and flag) unless `clear_flags`.
    pub async fn reload(&self, pg: &PgPool, clear_flags: bool) -> Result<usize> {
        let all = repo::all(pg).await.context("loading vouchers into the cache")?;
        let mut map = self.map.write().expect("cache poisoned");
        let mut fresh = HashMap::with_capacity(all.len());
        for v in all {
            let entry = match map.remove(&v.id) {
                Some(old) if old.voucher == v => {
                    if clear_flags {
                        old.stock_returned();
                    }
                    old
                }
                _ => Arc::new(Entry::new(v)),
            };
            fresh.insert(entry.voucher.id, entry);
        }
        *map = fresh;
        Ok(map.len())
    }

    async fn apply(&self, pg: &PgPool, event: Event) -> Result<()> {
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

/// Keeps `cache` current until `stop`: subscribe, reload, apply events, and start
/// over after any failure.
pub async fn follow(cache: Arc<VoucherCache>, pg: PgPool, redis: Redis, keys: Keys, stop: CancellationToken) {
    crate::supervise::supervise("voucher cache", &stop, || {
        follow_once(&cache, &pg, &redis, &keys, &stop)
    })
    .await
}

async fn follow_once(
    cache: &VoucherCache,
    pg: &PgPool,
    redis: &Redis,
    keys: &Keys,
    stop: &CancellationToken,
) -> Result<()> {
    let mut pubsub = redis.client().get_async_pubsub().await.context("opening pub/sub")?;
    pubsub
        .subscribe(keys.events())
        .await
        .context("subscribing to voucher events")?;
    // Subscribed first, then reloaded: no change can fall between the two.
    cache.reload(pg, true).await?;
    let mut messages = pubsub.on_message();
    let mut refresh = tokio::time::interval(REFRESH_EVERY);
    refresh.tick().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = refresh.tick() => { cache.reload(pg, false).await?; }
            msg = messages.next() => {
                let Some(msg) = msg else { anyhow::bail!("pub/sub stream ended") };
                let payload: String = msg.get_payload().unwrap_or_default();
                match Event::decode(&payload) {
                    Some(event) => {
                        if let Err(e) = cache.apply(pg, event).await {
                            tracing::warn!(error = %format!("{e:#}"), ?event, "applying a voucher event failed; reloading");
                            cache.reload(pg, true).await?;
                        }
                    }
                    None => tracing::warn!(payload, "ignoring an unknown voucher event"),
                }
            }
        }
    }
}
