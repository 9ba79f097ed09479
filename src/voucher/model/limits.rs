//! The bounds of a voucher's numbers: stock, money and shards.
/// Largest stock one voucher may have.
pub const MAX_STOCK: i64 = 100_000_000;
/// Largest price, in cents, a voucher may have.
pub const MAX_MONEY: i64 = i64::MAX / 2;

/// Most shards one sale may have.
pub const MAX_SHARDS: i64 = 64;
