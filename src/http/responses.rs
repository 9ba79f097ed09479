//! The error answers many endpoints share, named once for the OpenAPI document
//! (each endpoint's `#[utoipa::path]` lists them by name).
use super::error::ErrorBody;
use utoipa::IntoResponses;

/// `validation_failed` (the message starts with the field's name), or
/// `invalid_json` (the body is not JSON).
#[derive(IntoResponses)]
#[response(status = 400)]
pub struct BadRequest(pub ErrorBody<'static>);

/// `unauthorized`: the bearer token is missing, malformed, expired or wrongly
/// signed.
#[derive(IntoResponses)]
#[response(status = 401)]
pub struct Unauthorized(pub ErrorBody<'static>);

/// `forbidden`: the token does not carry the role this endpoint needs.
#[derive(IntoResponses)]
#[response(status = 403)]
pub struct Forbidden(pub ErrorBody<'static>);

/// `voucher_not_found`.
#[derive(IntoResponses)]
#[response(status = 404)]
pub struct VoucherNotFound(pub ErrorBody<'static>);

/// `order_not_found`, also for an order of someone else.
#[derive(IntoResponses)]
#[response(status = 404)]
pub struct OrderNotFound(pub ErrorBody<'static>);

/// `not_a_flash_sale`: an ordinary voucher has no stock and no books.
#[derive(IntoResponses)]
#[response(status = 409)]
pub struct NotAFlashSale(pub ErrorBody<'static>);

/// How an endpoint that takes a JSON body refuses one it cannot read.
#[derive(IntoResponses)]
pub enum BodyRefused {
    /// `payload_too_large`: over `SECKILL_BODY_LIMIT_BYTES`.
    #[response(status = 413)]
    TooLarge(ErrorBody<'static>),
    /// `unsupported_media_type`: sent without `Content-Type: application/json`.
    #[response(status = 415)]
    NotJson(ErrorBody<'static>),
}

/// `rate_limited`: too many requests from this address (or, for orders and for
/// pay and cancel, of this shopper). `Retry-After` says when to try again.
#[derive(IntoResponses)]
#[response(status = 429, headers(("Retry-After" = u64, description = "seconds")))]
pub struct RateLimited(pub ErrorBody<'static>);

/// `unavailable`: the instance is at capacity, a dependency does not answer, or
/// the sale's state is being checked. `Retry-After` says when to try again. An order
/// refused so may still have been admitted (`GET .../orders/mine` tells); retrying
/// it is safe.
#[derive(IntoResponses)]
#[response(status = 503, headers(("Retry-After" = u64, description = "seconds")))]
pub struct Unavailable(pub ErrorBody<'static>);
