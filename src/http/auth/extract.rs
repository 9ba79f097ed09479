//! The caller of a request, from its `Authorization: Bearer` header: what every
//! route that needs a caller extracts.
use super::caller::Caller;
use super::jwt::JwtKeys;
use crate::http::error::ApiError;
use actix_web::{dev::Payload, web, FromRequest, HttpRequest};
use std::future::{ready, Ready};

pub(crate) fn caller_of(req: &HttpRequest) -> Result<Caller, ApiError> {
    let keys = req
        .app_data::<web::Data<JwtKeys>>()
        .ok_or_else(|| ApiError::internal(anyhow::anyhow!("JwtKeys not registered")))?;
    let header = req
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .ok_or_else(|| ApiError::unauthorized("missing Authorization header"))?;
    let value = header
        .to_str()
        .map_err(|_| ApiError::unauthorized("malformed Authorization header"))?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ApiError::unauthorized("Authorization must be 'Bearer <token>'"))?;
    let caller = keys.verify(token)?;
    // On the request's root span (`user_id` of `crate::http::request_span`): every
    // log line of the request names its caller, with no span of the handler's own.
    tracing::Span::current().record("user_id", caller.user_id);
    Ok(caller)
}

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(caller_of(req))
    }
}
