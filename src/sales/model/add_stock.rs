//! [`AddStock`]: a top-up's body and its validation.
use super::limits::MAX_STOCK;
use crate::validate::{whole, ValidationError};
use serde_json::Value;
use utoipa::ToSchema;

/// A validated `POST /api/v1/admin/vouchers/{id}/stock` body: units to put on
/// sale on top of the stock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ToSchema)]
pub struct AddStock {
    /// The total stock may not exceed 100,000,000.
    #[schema(minimum = 1, maximum = 100_000_000)]
    pub add: i32,
}

impl AddStock {
    pub fn parse(body: &Value) -> Result<Self, ValidationError> {
        let add = body
            .get("add")
            .filter(|v| !v.is_null())
            .ok_or_else(|| ValidationError::new("add", "is required"))?;
        Ok(Self {
            add: whole(add, "add", 1, MAX_STOCK)? as i32,
        })
    }
}
