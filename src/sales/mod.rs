//! Vouchers: the model and its validation, the views the routes answer, Postgres
//! queries, the Redis side of a flash sale (stock and outbox), stock top-ups, the
//! in-process cache the order path reads, and the views the voucher routes answer
//! (a sale's books and live numbers are reports: [`crate::reports`]).
pub mod cache;
pub mod model;
pub mod moves;
pub mod pg_stock;
pub mod refill;
pub mod repo;
pub mod service;
pub mod shards;
pub mod sql;
pub mod stock;
pub mod topup;
pub mod view;

pub use model::{FlashSale, NewVoucher, Voucher};
