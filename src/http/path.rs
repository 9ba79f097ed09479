//! Ids in paths: a decimal string of a positive 64-bit number, or 400 naming `id`.
use super::error::ApiError;
use crate::id;

/// The voucher named in a path (`/vouchers/{id}/...`).
pub fn path_id(raw: &str) -> Result<id::VoucherId, ApiError> {
    id::parse_str(raw)
        .map(id::VoucherId::new)
        .map_err(|e| ApiError::validation("id", e))
}

/// The order named in a path (`/orders/{order_id}/...`).
pub fn path_order_id(raw: &str) -> Result<id::OrderId, ApiError> {
    id::parse_str(raw)
        .map(id::OrderId::new)
        .map_err(|e| ApiError::validation("order_id", e))
}
