//! Fair admission: who may order a flash sale, when it is not first
//! come, first served.
//!
//! A sale's [`Mode`]: `first_come` (the fast path, unchanged), `queue` (a waiting
//! room admitting at a rate) or `raffle` (entries, then a draw anyone can
//! recompute). A shopper the queue admitted, or a raffle's winner, gets a short-lived
//! signed admission token ([`token`]) that the order endpoint checks in process:
//! the order path stays one Redis round trip. Joining or entering may cost a proof
//! of work ([`pow`], the ALTCHA challenge format).
//!
//! Places, entries and draws are in Postgres ([`queue`], [`raffle`], [`draw`]): durable,
//! and decided in transactions, so that a crash of an instance loses no place and
//! no win and a draw run twice draws the same winners. The queue's frontier is
//! cached per instance ([`frontier`]), so that polling a place costs no query.
//! Nothing here imports the HTTP layer or the voucher module.
pub mod addresses;
pub mod advance;
pub mod beacon;
pub mod draw;
pub mod frontier;
pub mod mode;
pub mod pow;
pub mod queue;
pub mod raffle;
pub mod rule;
mod service;
pub mod signing;
pub mod sql;
pub mod token;
pub mod verify;

pub use mode::Mode;
pub use service::Admission;
