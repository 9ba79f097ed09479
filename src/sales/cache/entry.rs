//! [`Entry`]: one cached voucher and its local sold-out flag (set, trusted for
//! [`SOLD_OUT_TTL`](super::SOLD_OUT_TTL), probed, cleared).
use super::sold_out::{cleared, flagged_at, now_ms, trusted, FLAG};
use crate::sales::model::Voucher;
use std::sync::atomic::{AtomicU64, Ordering};

pub struct Entry {
    pub voucher: Voucher,
    /// generation | stamp | sold-out flag (see the constants of `word`).
    pub(super) state: AtomicU64,
    /// When [`VoucherCache::put`](super::VoucherCache::put) stored it (the cache's
    /// count of puts; 0 for an entry a reload made).
    pub(super) put_at: u64,
}

/// What [`Entry::read_sold_out_flag`] saw before a Redis call, to report the answer against.
#[derive(Clone, Copy)]
pub struct Observed(u64);

impl Entry {
    pub(super) fn new(voucher: Voucher) -> Self {
        Self {
            voucher,
            state: AtomicU64::new(0),
            put_at: 0,
        }
    }

    /// Whether this instance already knows the sale is sold out. False also for the
    /// one request that is to check a flag older than
    /// [`SOLD_OUT_TTL`](super::SOLD_OUT_TTL) with Redis: report its answer with
    /// [`Entry::mark_sold_out`] or [`Entry::in_stock`].
    pub fn read_sold_out_flag(&self) -> (bool, Observed) {
        self.read_sold_out_flag_at(now_ms)
    }

    /// [`Entry::read_sold_out_flag`] on the clock `now` (read only if the flag is set).
    pub(super) fn read_sold_out_flag_at(&self, now: impl FnOnce() -> u64) -> (bool, Observed) {
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

    /// Whether the flag is set and still trusted: a look that changes nothing
    /// (no probe is taken; [`Entry::read_sold_out_flag`] decides who probes).
    pub fn known_sold_out(&self) -> bool {
        let s = self.state.load(Ordering::Acquire);
        s & FLAG != 0 && trusted(s, now_ms())
    }

    /// Records "sold out" (or renews the flag) unless stock came back since `seen`.
    pub fn mark_sold_out(&self, seen: Observed) {
        self.mark_sold_out_at(seen, now_ms())
    }

    pub(super) fn mark_sold_out_at(&self, seen: Observed, now_ms: u64) {
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
