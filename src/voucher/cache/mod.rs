//! The in-process voucher cache the order path reads instead of Postgres.
//!
//! It holds every voucher. Admin changes reach every instance through a Redis
//! pub/sub channel (`<ns>:events`); a full reload runs at start, after the
//! subscription reconnects (messages may have been missed), and every
//! `REFRESH_EVERY` as a backstop.
//!
//! A pause or resume must reach every instance within about a second even if its
//! event is lost, and 30 s is too long for that. So [`watch_pauses`] (a task of its
//! own, independent of the pub/sub connection) reads the ids of the paused sales
//! from Postgres every [`PAUSE_CHECK_EVERY`] (a partial index keeps that one small
//! query) and reloads each voucher whose `paused` the cache has wrong.
//!
//! Each entry also carries the local sold-out flag: once Redis answered "sold out",
//! this instance refuses further orders without a Redis call. A stock event (top-up,
//! stock return) clears it on every instance at once. The event is not the only way
//! out: pub/sub is fire-and-forget, so a publish can be lost (a crash between the
//! Postgres and Redis halves of a return, a subscriber reconnecting), and stock would
//! then stay unsold while Redis has it. So the flag is trusted for [`SOLD_OUT_TTL`]
//! (1 s) only. The first request after that asks Redis itself (the "probe"; the flag
//! is re-stamped as it leaves, so the requests arriving meanwhile are still refused)
//! and its answer renews the flag (sold out) or clears it (accepted). Bounds, per
//! instance and voucher, with no event at all:
//!
//! - while the sale stays sold out, at most one order request per `SOLD_OUT_TTL`
//!   reaches Redis;
//! - stock that came back is on sale again within `SOLD_OUT_TTL` of the flag's last
//!   renewal, plus one `SOLD_OUT_TTL` per probe whose answer cannot tell (the
//!   shopper already has an order, Redis unreachable): those leave the flag as it is
//!   until the next probe.
//!
//! A reconnection is no event either: the reload after the subscription (re)starts
//! keeps the flags, and the TTL covers a stock event missed meanwhile. (Clearing
//! them let a burst per sold-out sale through to Redis at every reconnection, and
//! at start, when the first subscription came after the instance began selling.)
//!
//! Ids that do not exist are remembered briefly too ([`missing`]), so that asking
//! for them again does not reach Postgres.
//!
//! The flag, the instant it was last set or renewed and a generation share one
//! atomic word (no lock, no allocation; the clock is read only while the flag is
//! set). Every clear starts a new generation, so a sold-out answer that raced with a
//! top-up or a probe's clear cannot set the flag after the clear.
use super::model::Voucher;
use super::repo;
use super::stock::Event;
use crate::keys::Keys;
use crate::redis_conn::Redis;
use anyhow::{Context, Result};
use futures::StreamExt;
use sqlx::PgPool;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, RwLock};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

pub mod missing;

const REFRESH_EVERY: Duration = Duration::from_secs(30);

/// How often every instance compares its paused sales with Postgres's.
pub const PAUSE_CHECK_EVERY: Duration = Duration::from_millis(500);

/// How long a "sold out" from Redis is trusted before a request asks Redis again.
pub const SOLD_OUT_TTL: Duration = Duration::from_secs(1);
const TTL_MS: u64 = SOLD_OUT_TTL.as_millis() as u64;

// The state word: bit 0 the sold-out flag; bits 1..=40 when the flag was last set or
// renewed, in milliseconds on this process's monotonic clock (40 bits: 34 years);
// bits 41..=63 the generation, bumped by every clear (it wraps; a stale answer would
// have to be 2^23 clears late and carry the same stamp to be mistaken for current).
const FLAG: u64 = 1;
const STAMP_SHIFT: u32 = 1;
const STAMP_MASK: u64 = ((1 << 40) - 1) << STAMP_SHIFT;
const GEN_SHIFT: u32 = 41;

fn stamp(s: u64) -> u64 {
    (s & STAMP_MASK) >> STAMP_SHIFT
}

/// `s` with the flag set, stamped `now_ms`.
fn flagged_at(s: u64, now_ms: u64) -> u64 {
    (s & !STAMP_MASK) | ((now_ms << STAMP_SHIFT) & STAMP_MASK) | FLAG
}

/// Whether `s` holds a flag set or renewed less than `SOLD_OUT_TTL` before `now_ms`.
fn trusted(s: u64, now_ms: u64) -> bool {
    s & FLAG != 0 && now_ms.saturating_sub(stamp(s)) < TTL_MS
}

/// Cleared: the next generation, no flag, no stamp.
fn cleared(s: u64) -> u64 {
    ((s >> GEN_SHIFT).wrapping_add(1)) << GEN_SHIFT
}

/// Milliseconds on a monotonic clock that starts with the process.
fn now_ms() -> u64 {
    static START: LazyLock<Instant> = LazyLock::new(Instant::now);
    START.elapsed().as_millis() as u64
}

pub struct Entry {
    pub voucher: Voucher,
    /// generation | stamp | sold-out flag (see the constants above).
    state: AtomicU64,
    /// When [`VoucherCache::put`] stored it (the cache's count of puts; 0 for an
    /// entry a reload made).
    put_at: u64,
}

/// What [`Entry::read_sold_out_flag`] saw before a Redis call, to report the answer against.
#[derive(Clone, Copy)]
pub struct Observed(u64);

impl Entry {
    fn new(voucher: Voucher) -> Self {
        Self {
            voucher,
            state: AtomicU64::new(0),
            put_at: 0,
        }
    }

    /// Whether this instance already knows the sale is sold out. False also for the
    /// one request that is to check a flag older than [`SOLD_OUT_TTL`] with Redis:
    /// report its answer with [`Entry::mark_sold_out`] or [`Entry::in_stock`].
    pub fn read_sold_out_flag(&self) -> (bool, Observed) {
        self.read_sold_out_flag_at(now_ms)
    }

    /// [`Entry::read_sold_out_flag`] on the clock `now` (read only if the flag is set).
    fn read_sold_out_flag_at(&self, now: impl FnOnce() -> u64) -> (bool, Observed) {
        let mut s = self.state.load(Ordering::Acquire);
        if s & FLAG == 0 {
            return (false, Observed(s));
        }
        let now = now();
        loop {
            if s & FLAG == 0 {
                // Cleared meanwhile: stock came back.
                return (false, Observed(s));
            }
            if trusted(s, now) {
                return (true, Observed(s));
            }
            // Trusted long enough: this request asks Redis. The flag is re-stamped
            // first, so the requests arriving meanwhile are still refused.
            let probe = flagged_at(s, now);
            match self
                .state
                .compare_exchange(s, probe, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return (false, Observed(probe)),
                // Another request probed, or the flag was cleared or renewed: decide
                // again on what is there now (a renewal this request's clock already
                // sees run out has no probe yet; this request may be it).
                Err(current) => s = current,
            }
        }
    }

    /// Records "sold out" (or renews the flag) unless stock came back since `seen`.
    pub fn mark_sold_out(&self, seen: Observed) {
        self.mark_sold_out_at(seen, now_ms())
    }

    fn mark_sold_out_at(&self, seen: Observed, now_ms: u64) {
        let _ = self
            .state
            .compare_exchange(seen.0, flagged_at(seen.0, now_ms), Ordering::AcqRel, Ordering::Relaxed);
    }

    /// Redis accepted an order. If the request was a probe of the flag, stock came
    /// back without an event reaching this instance: clear the flag, unless it
    /// changed since.
    pub fn in_stock(&self, seen: Observed) {
        if seen.0 & FLAG != 0 {
            let _ = self
                .state
                .compare_exchange(seen.0, cleared(seen.0), Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// Stock came back: clear the flag and start a new generation.
    pub fn stock_returned(&self) {
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| Some(cleared(s)));
    }
}

#[derive(Default)]
pub struct VoucherCache {
    map: RwLock<HashMap<i64, Arc<Entry>>>,
    /// Puts so far: a reload keeps what was put after it read Postgres.
    puts: AtomicU64,
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
    fn install(&self, all: Vec<Voucher>, read_at: u64, clear_flags: bool) -> usize {
        let mut map = self.map.write().expect("cache poisoned");
        // Events may have been lost: what was missing may exist now.
        self.missing.clear();
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
    let mut pubsub = redis.pubsub().await.context("opening pub/sub")?;
    pubsub
        .subscribe(keys.events())
        .await
        .context("subscribing to voucher events")?;
    // Subscribed first, then reloaded: no change can fall between the two. The
    // sold-out flags stay: a stock event missed meanwhile is covered by their TTL.
    cache.reload(pg, false).await?;
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

/// Keeps every sale's `paused` in `cache` within [`PAUSE_CHECK_EVERY`] of
/// Postgres's until `stop`, whether or not the pub/sub event arrived.
pub async fn watch_pauses(cache: Arc<VoucherCache>, pg: PgPool, stop: CancellationToken) {
    let mut every = tokio::time::interval(PAUSE_CHECK_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = every.tick() => match cache.sync_pauses(&pg).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(vouchers = n, "caught up with pauses whose event did not arrive"),
                // Postgres away: the next tick tries again (the cache keeps what it knows).
                Err(e) => tracing::debug!(error = %format!("{e:#}"), "pause check failed"),
            },
        }
    }
}

#[cfg(test)]
mod tests;
