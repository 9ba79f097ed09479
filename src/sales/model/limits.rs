//! The bounds of a voucher's numbers: stock, money, shards and admission.
/// Largest stock one voucher may have.
pub const MAX_STOCK: i64 = 100_000_000;
/// Largest price, in cents, a voucher may have.
pub const MAX_MONEY: i64 = i64::MAX / 2;

/// Most shards one sale may have.
pub const MAX_SHARDS: i64 = 64;

/// A queue's admit rate: the most shoppers a second, and the default.
pub const MAX_ADMIT_RATE: i64 = 1_000_000;
pub const DEFAULT_ADMIT_RATE: i64 = 100;
/// How long a queue's turn may last, in seconds, and the default.
pub const MAX_TURN_SECS: i64 = 86_400;
pub const DEFAULT_TURN_SECS: i64 = 300;
/// The hardest proof of work an admin may ask.
pub const MAX_DIFFICULTY: i64 = crate::admission::pow::MAX_DIFFICULTY;
