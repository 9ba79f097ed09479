//! The extractors of the roles a route means: [`Admin`] for `/api/v1/admin/*`,
//! [`ServiceCaller`] for the sequences, [`Shopper`] for ordering, paying,
//! cancelling and "mine" (an `admin` or `service` token is not a shopper: 403).
//! A valid token without the role gets 403 `forbidden`.
use super::caller::{Caller, Role};
use super::extract::caller_of;
use crate::http::error::ApiError;
use actix_web::{dev::Payload, FromRequest, HttpRequest};
use std::future::{ready, Ready};

/// A caller with the `admin` role (403 for any other valid token).
pub struct Admin(pub Caller);

impl FromRequest for Admin {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(caller_of(req).and_then(|c| match c.role {
            Role::Admin => Ok(Admin(c)),
            _ => Err(ApiError::forbidden("this endpoint needs the admin role")),
        }))
    }
}

/// A caller with the `service` or `admin` role.
pub struct ServiceCaller(pub Caller);

impl FromRequest for ServiceCaller {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(caller_of(req).and_then(|c| match c.role {
            Role::Admin | Role::Service => Ok(ServiceCaller(c)),
            Role::Shopper => Err(ApiError::forbidden("this endpoint needs the service or admin role")),
        }))
    }
}

/// A caller with no role: a shopper. The shopper routes refuse `admin` and
/// `service` tokens, so that a leaked operator token cannot order, and an order's
/// `user_id` is always a shopper's.
pub struct Shopper(pub Caller);

impl FromRequest for Shopper {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(caller_of(req).and_then(|c| match c.role {
            Role::Shopper => Ok(Shopper(c)),
            _ => Err(ApiError::forbidden(
                "this endpoint is for shoppers: an admin or service token cannot use it",
            )),
        }))
    }
}
