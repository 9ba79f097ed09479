//! The HTTP boundary: the contract's error body, authentication, ids as strings,
//! health checks, and the handlers for malformed requests.
pub mod admission;
pub mod auth;
pub mod error;
pub mod health;
pub mod id;
pub mod openapi;
pub mod request_span;

pub use error::ApiError;
