//! The voucher, and the validation of a new one and of a top-up, with errors that
//! name the field. The OpenAPI schemas of these types state the same rules.
mod add_stock;
mod limits;
mod new_voucher;
#[cfg(test)]
mod tests;
mod voucher;

pub use add_stock::AddStock;
pub use limits::{MAX_ADMIT_RATE, MAX_MONEY, MAX_SHARDS, MAX_STOCK};
pub use new_voucher::NewVoucher;
pub use voucher::{FlashSale, Voucher};
