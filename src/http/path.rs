//! Ids in paths: a decimal string of a positive 64-bit number, or 400 naming `id`.
use super::error::ApiError;
use crate::id;

pub fn path_id(raw: &str) -> Result<i64, ApiError> {
    id::parse_str(raw).map_err(|e| ApiError::validation("id", e))
}
