//! The HTTP boundary: the routes and their handlers (each calls into the domain),
//! the contract's error body and the mapping of domain errors to it,
//! authentication, admission control, health checks, the OpenAPI document and the
//! admin console page. The
//! domain never depends on this module.
pub mod admit_admin;
pub mod auth;
pub mod challenge;
pub mod client_addr;
pub mod console;
pub mod doc_headers;
pub mod doc_links;
pub mod error;
pub mod health;
pub mod idempotency;
pub mod lifecycle;
pub mod methods;
pub mod openapi;
pub mod orders;
pub mod path;
pub mod raffle;
pub mod rate_limits;
pub mod repair;
pub mod report;
pub mod request_id;
pub mod request_span;
pub mod responses;
pub mod sales;
pub mod sequences;
pub mod state;
pub mod stock;
pub mod vouchers;
pub mod waiting;
