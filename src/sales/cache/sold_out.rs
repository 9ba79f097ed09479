//! The state word of an entry: its sold-out flag, the instant the flag was last set
//! or renewed and a generation, packed in one `u64`, and how long a flag is trusted.
use std::sync::LazyLock;
use std::time::{Duration, Instant};

/// How long a "sold out" from Redis is trusted before a request asks Redis again.
pub const SOLD_OUT_TTL: Duration = Duration::from_secs(1);
pub(super) const TTL_MS: u64 = SOLD_OUT_TTL.as_millis() as u64;

// The state word: bit 0 the sold-out flag; bits 1..=40 when the flag was last set or
// renewed, in milliseconds on this process's monotonic clock (40 bits: 34 years);
// bits 41..=63 the generation, bumped by every clear (it wraps; a stale answer would
// have to be 2^23 clears late and carry the same stamp to be mistaken for current).
pub(super) const FLAG: u64 = 1;
const STAMP_SHIFT: u32 = 1;
const STAMP_MASK: u64 = ((1 << 40) - 1) << STAMP_SHIFT;
pub(super) const GEN_SHIFT: u32 = 41;

pub(super) fn stamp(s: u64) -> u64 {
    (s & STAMP_MASK) >> STAMP_SHIFT
}

/// `s` with the flag set, stamped `now_ms`.
pub(super) fn flagged_at(s: u64, now_ms: u64) -> u64 {
    (s & !STAMP_MASK) | ((now_ms << STAMP_SHIFT) & STAMP_MASK) | FLAG
}

/// Whether `s` holds a flag set or renewed less than `SOLD_OUT_TTL` before `now_ms`.
pub(super) fn trusted(s: u64, now_ms: u64) -> bool {
    s & FLAG != 0 && now_ms.saturating_sub(stamp(s)) < TTL_MS
}

/// Cleared: the next generation, no flag, no stamp.
pub(super) fn cleared(s: u64) -> u64 {
    ((s >> GEN_SHIFT).wrapping_add(1)) << GEN_SHIFT
}

/// Milliseconds on a monotonic clock that starts with the process.
pub(super) fn now_ms() -> u64 {
    static START: LazyLock<Instant> = LazyLock::new(Instant::now);
    START.elapsed().as_millis() as u64
}
