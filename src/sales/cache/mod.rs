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
mod entry;
mod follow;
pub mod missing;
mod pauses;
mod sold_out;
mod store;

pub use entry::{Entry, Observed};
pub use follow::follow;
pub use pauses::{watch_pauses, PAUSE_CHECK_EVERY};
pub use sold_out::SOLD_OUT_TTL;
pub use store::VoucherCache;

#[cfg(test)]
mod tests;
