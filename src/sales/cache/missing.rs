//! Ids asked for that Postgres did not have, remembered briefly, so that
//! `GET /api/v1/vouchers/{id}` for an id that does not exist (a scanner, a stale
//! link, a crowd refreshing a sale not yet created) reaches Postgres once per id
//! and `ttl`, not once per request.
//!
//! A voucher created later must not stay hidden behind its entry:
//! - [`super::VoucherCache::put`] (this instance's creation, and every other
//!   instance's voucher event) removes it, so the voucher shows at once where it
//!   was created and on the others as soon as its event arrives;
//! - an answer read from Postgres is remembered only if no put happened since the
//!   read began (a put racing the read may be the very voucher);
//! - a full reload (at start, every refresh, after the event subscription
//!   reconnects: events may have been lost) puts every voucher it reads in the
//!   map, which a lookup reads before this memory, and forgets their entries; an
//!   entry is trusted for `ttl` only.
//!
//! At most [`MAX_ENTRIES`]: beyond that the expired entries are dropped, and if
//! none had expired, all of them (a flood of distinct ids costs one query per id
//! either way; memory stays bounded).
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const MAX_ENTRIES: usize = 10_000;

/// `Default`: remembers nothing (a ttl of 0).
#[derive(Default)]
pub struct Missing {
    ttl: Duration,
    /// Id -> when Postgres said it had none.
    map: Mutex<HashMap<i64, Instant>>,
}

impl Missing {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            map: Mutex::default(),
        }
    }

    /// Whether Postgres said less than `ttl` ago that there is no voucher `id`.
    pub fn contains(&self, id: i64) -> bool {
        if self.ttl.is_zero() {
            return false;
        }
        let map = self.map.lock().expect("missing ids poisoned");
        map.get(&id).is_some_and(|at| at.elapsed() < self.ttl)
    }

    pub fn insert(&self, id: i64) {
        if self.ttl.is_zero() {
            return;
        }
        let mut map = self.map.lock().expect("missing ids poisoned");
        if map.len() >= MAX_ENTRIES {
            map.retain(|_, at| at.elapsed() < self.ttl);
            if map.len() >= MAX_ENTRIES {
                map.clear();
            }
        }
        map.insert(id, Instant::now());
    }

    pub fn remove(&self, id: i64) {
        self.map.lock().expect("missing ids poisoned").remove(&id);
    }

    /// Forgets each of `ids`.
    pub fn forget(&self, ids: impl Iterator<Item = i64>) {
        let mut map = self.map.lock().expect("missing ids poisoned");
        if map.is_empty() {
            return;
        }
        for id in ids {
            map.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_are_removed_and_stay_bounded() {
        let m = Missing::new(Duration::from_secs(60));
        m.insert(1);
        assert!(m.contains(1) && !m.contains(2));
        m.remove(1);
        assert!(!m.contains(1));
        for id in 0..(MAX_ENTRIES as i64 + 5) {
            m.insert(id);
        }
        assert!(m.map.lock().unwrap().len() <= MAX_ENTRIES);
        let off = Missing::new(Duration::ZERO);
        off.insert(1);
        assert!(!off.contains(1));
        let brief = Missing::new(Duration::from_nanos(1));
        brief.insert(1);
        std::thread::sleep(Duration::from_millis(1));
        assert!(!brief.contains(1), "an entry is trusted for ttl only");
    }
}
