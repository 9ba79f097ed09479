//! The voucher, and the validation of a new one with errors that name the field.
use crate::http::{id, ApiError};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value};

/// Largest stock one voucher may have.
pub const MAX_STOCK: i64 = 100_000_000;

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FlashSale {
    /// Everything put on sale: the initial stock plus top-ups.
    pub stock: i32,
    pub begin_at: DateTime<Utc>,
    pub end_at: DateTime<Utc>,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Voucher {
    #[serde(with = "crate::http::id")]
    pub id: i64,
    #[serde(with = "crate::http::id")]
    pub shop_id: i64,
    pub title: String,
    pub sub_title: Option<String>,
    pub rules: Option<String>,
    pub pay_value: i64,
    pub actual_value: i64,
    #[serde(flatten)]
    pub flash: Option<FlashSale>,
    pub created_at: DateTime<Utc>,
}

impl Voucher {
    pub fn is_flash_sale(&self) -> bool {
        self.flash.is_some()
    }
}

/// A validated `POST /api/v1/admin/vouchers` body.
#[derive(Clone, Debug)]
pub struct NewVoucher {
    pub shop_id: i64,
    pub title: String,
    pub sub_title: Option<String>,
    pub rules: Option<String>,
    pub pay_value: i64,
    pub actual_value: i64,
    pub flash: Option<FlashSale>,
}

impl NewVoucher {
    /// Validates a JSON body field by field; the first problem is reported.
    pub fn parse(body: &Value) -> Result<Self, ApiError> {
        let obj = body
            .as_object()
            .ok_or_else(|| ApiError::validation("body", "must be a JSON object"))?;
        let shop_id = id::parse_value(required(obj, "shop_id")?).map_err(|e| ApiError::validation("shop_id", e))?;
        let title = text(obj, "title", 255)?.ok_or_else(|| ApiError::validation("title", "is required"))?;
        if title.trim().is_empty() {
            return Err(ApiError::validation("title", "must not be blank"));
        }
        let sub_title = text(obj, "sub_title", 255)?;
        let rules = text(obj, "rules", 4096)?;
        let pay_value = money(obj, "pay_value")?;
        let actual_value = money(obj, "actual_value")?;
        let stock = optional(obj, "stock")
            .map(|v| whole(v, "stock", 0, MAX_STOCK))
            .transpose()?;
        let begin_at = optional(obj, "begin_at").map(|v| time(v, "begin_at")).transpose()?;
        let end_at = optional(obj, "end_at").map(|v| time(v, "end_at")).transpose()?;
        let flash = match (stock, begin_at, end_at) {
            (None, None, None) => None,
            (None, _, _) => {
                return Err(ApiError::validation(
                    "stock",
                    "is required for a flash-sale voucher (begin_at/end_at given)",
                ))
            }
            (Some(_), None, _) => return Err(ApiError::validation("begin_at", "is required for a flash-sale voucher")),
            (Some(_), _, None) => return Err(ApiError::validation("end_at", "is required for a flash-sale voucher")),
            (Some(stock), Some(begin_at), Some(end_at)) => {
                if begin_at >= end_at {
                    return Err(ApiError::validation("end_at", "must be after begin_at"));
                }
                Some(FlashSale {
                    stock: stock as i32,
                    begin_at,
                    end_at,
                })
            }
        };
        Ok(Self {
            shop_id,
            title,
            sub_title,
            rules,
            pay_value,
            actual_value,
            flash,
        })
    }
}

fn optional<'a>(obj: &'a Map<String, Value>, field: &str) -> Option<&'a Value> {
    obj.get(field).filter(|v| !v.is_null())
}

fn required<'a>(obj: &'a Map<String, Value>, field: &str) -> Result<&'a Value, ApiError> {
    optional(obj, field).ok_or_else(|| ApiError::validation(field, "is required"))
}

fn text(obj: &Map<String, Value>, field: &str, max_chars: usize) -> Result<Option<String>, ApiError> {
    match optional(obj, field) {
        None => Ok(None),
        Some(Value::String(s)) if s.chars().count() > max_chars => Err(ApiError::validation(
            field,
            format!("must be at most {max_chars} characters"),
        )),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(ApiError::validation(
            field,
            format!("must be a string, got {}", id::kind(other)),
        )),
    }
}

fn money(obj: &Map<String, Value>, field: &str) -> Result<i64, ApiError> {
    whole(required(obj, field)?, field, 0, i64::MAX / 2)
}

/// A whole number in `min..=max`.
pub fn whole(v: &Value, field: &str, min: i64, max: i64) -> Result<i64, ApiError> {
    let n = match v {
        Value::Number(n) => n.as_i64(),
        _ => {
            return Err(ApiError::validation(
                field,
                format!("must be a whole number, got {}", id::kind(v)),
            ))
        }
    };
    match n {
        Some(n) if n < min => Err(ApiError::validation(field, format!("must be >= {min}"))),
        Some(n) if n > max => Err(ApiError::validation(field, format!("must be <= {max}"))),
        Some(n) => Ok(n),
        None => Err(ApiError::validation(
            field,
            format!("must be a whole number between {min} and {max}"),
        )),
    }
}

fn time(v: &Value, field: &str) -> Result<DateTime<Utc>, ApiError> {
    let s = v
        .as_str()
        .ok_or_else(|| ApiError::validation(field, "must be an RFC 3339 time with an offset"))?;
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.to_utc())
        .map_err(|_| ApiError::validation(field, format!("must be an RFC 3339 time with an offset, got {s:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({"shop_id": "1", "title": "t", "pay_value": 100, "actual_value": 200,
               "stock": 10, "begin_at": "2026-01-01T00:00:00+08:00", "end_at": "2026-01-02T00:00:00Z"})
    }

    fn field_of(body: Value) -> String {
        let e = NewVoucher::parse(&body).unwrap_err();
        assert_eq!(e.code, "validation_failed");
        e.message.split(':').next().unwrap().to_string()
    }

    #[test]
    fn a_valid_flash_sale_parses() {
        let v = NewVoucher::parse(&base()).unwrap();
        assert_eq!(v.flash.unwrap().stock, 10);
    }

    #[test]
    fn each_rule_names_its_field() {
        let cases = [
            ("stock", json!(-1)),
            ("stock", json!("ten")),
            ("pay_value", json!(-5)),
            ("actual_value", json!(1.5)),
            ("title", json!("")),
            ("title", json!("x".repeat(256))),
            ("shop_id", json!("0")),
            ("shop_id", json!("99999999999999999999")),
            ("begin_at", json!("yesterday")),
        ];
        for (field, value) in cases {
            let mut b = base();
            b[field] = value;
            assert_eq!(field_of(b), field);
        }
        let mut b = base();
        b["end_at"] = b["begin_at"].clone();
        assert_eq!(field_of(b), "end_at");
        let mut b = base();
        b.as_object_mut().unwrap().remove("stock");
        assert_eq!(field_of(b), "stock");
    }
}
