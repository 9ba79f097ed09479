//! `Authorization: Bearer <JWT>`: HS256 with secrets by purpose, or an identity
//! provider's asymmetric keys for shopper tokens ([`jwks`], see [`JwtKeys`]). Claims: `sub` (user id, decimal string),
//! `exp` (required), `role` (absent for shoppers, `admin`, or `service`); `nbf`
//! honoured; a token that lives longer than `SECKILL_JWT_MAX_TTL_SECS` (`exp - iat`,
//! or `exp - now` without `iat`) refused; `iss` and `aud` required when configured
//! (`SECKILL_JWT_ISSUER`, `SECKILL_JWT_AUDIENCE`). The role each route needs is in
//! [`roles`]; the caller comes from [`extract`], the keys from [`jwt`].
mod caller;
mod extract;
mod hs256;
pub mod jwks;
mod jwt;
mod recent;
mod roles;

pub use caller::{Caller, Role};
pub(super) use extract::caller_of;
pub use jwt::{JwtKeys, TokenPolicy};
pub use roles::{Admin, ServiceCaller, Shopper};

#[cfg(test)]
mod tests;
