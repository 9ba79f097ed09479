//! Vouchers: the model and its validation, Postgres queries, the Redis side of a
//! flash sale (stock and outbox), the in-process cache the order path reads, and
//! the admin and public routes.
pub mod cache;
pub mod model;
pub mod rebuild;
pub mod repo;
pub mod routes;
pub mod stock;

pub use model::{FlashSale, NewVoucher, Voucher};
