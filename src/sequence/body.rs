//! The JSON bodies the sequence routes take and give. Request bodies are checked
//! field by field (see [`crate::validate`]), in the order the routes always checked
//! them, so that the first problem reported does not change.
use crate::validate::{self, string, whole, ValidationError};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// Most numbers one call may take.
pub const MAX_COUNT: i64 = 1000;

/// `PUT /api/v1/admin/sequences/{name}`: the rule to create or replace.
#[derive(Clone, Debug, PartialEq, Eq, ToSchema)]
pub struct RuleRequest {
    /// Printed before the date: no whitespace or control characters.
    #[schema(
        min_length = 1,
        max_length = 32,
        pattern = "^[^\\s\\u0000-\\u001f\\u007f-\\u009f]+$",
        example = "YD"
    )]
    pub prefix: String,
    /// `yyyy` or `yy`, `MM` and `dd` (all three: numbers restart every day), and
    /// the separators `-` `/` `.` `_`.
    #[schema(pattern = "^(yyyy|yy|MM|dd|[-/._])+$", example = "yyMMdd")]
    pub date_format: String,
    /// Digits of the counter, zero-padded; a larger number grows wider.
    #[schema(minimum = 1, maximum = 18)]
    pub min_width: i64,
    /// IANA zone whose midnight starts a new day; `SECKILL_TIME_ZONE` if absent.
    #[schema(example = "Asia/Shanghai")]
    pub time_zone: Option<String>,
}

impl RuleRequest {
    /// The body's shape; the rule's own checks ([`super::Rule::parse_parts`]) come next.
    pub fn parse(body: &Value) -> Result<Self, ValidationError> {
        let min_width = whole(required(body, "min_width")?, "min_width", i64::MIN, i64::MAX)?;
        let time_zone = given(body, "time_zone").map(|v| string(v, "time_zone")).transpose()?;
        let prefix = string(required(body, "prefix")?, "prefix")?;
        let date_format = string(required(body, "date_format")?, "date_format")?;
        Ok(Self {
            prefix: prefix.to_owned(),
            date_format: date_format.to_owned(),
            min_width,
            time_zone: time_zone.map(str::to_owned),
        })
    }
}

/// `POST /api/v1/sequences/{name}/next`: whose numbers, and how many.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ToSchema)]
pub struct NextRequest {
    /// Numbers are counted per tenant.
    #[schema(schema_with = crate::id::input_schema)]
    pub tenant_id: i64,
    #[schema(required = false, minimum = 1, maximum = 1000, default = 1)]
    pub count: u64,
}

impl NextRequest {
    pub fn parse(body: &Value) -> Result<Self, ValidationError> {
        let tenant_id = validate::id(required(body, "tenant_id")?, "tenant_id")?;
        let count = match given(body, "count") {
            None => 1,
            Some(v) => whole(v, "count", 1, MAX_COUNT)?,
        };
        Ok(Self {
            tenant_id,
            count: count as u64,
        })
    }
}

/// `count` consecutive numbers of the rule, for the tenant, of the rule's day.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct NextValues {
    #[schema(example = json!(["YD261121001", "YD261121002"]))]
    pub values: Vec<String>,
}

/// A field that is absent or null is not given (a body that is not an object has
/// no fields).
fn given<'a>(body: &'a Value, field: &str) -> Option<&'a Value> {
    body.get(field).filter(|v| !v.is_null())
}

fn required<'a>(body: &'a Value, field: &str) -> Result<&'a Value, ValidationError> {
    given(body, field).ok_or_else(|| ValidationError::new(field, "is required"))
}
