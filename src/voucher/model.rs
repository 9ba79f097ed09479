//! The voucher, and the validation of a new one and of a top-up, with errors that
//! name the field. The OpenAPI schemas of these types state the same rules.
use crate::validate::{self, optional, refused_class, required, text, time, whole, Lines, ValidationError};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{json, Value};
use utoipa::ToSchema;

/// Largest stock one voucher may have.
pub const MAX_STOCK: i64 = 100_000_000;
/// Largest price, in cents, a voucher may have.
pub const MAX_MONEY: i64 = i64::MAX / 2;

/// The flash-sale part of a voucher: its three fields are all present (a flash
/// sale) or all absent (an ordinary voucher, which cannot be ordered through the
/// flash-sale endpoint).
#[derive(Clone, Debug, Serialize, PartialEq, Eq, ToSchema)]
pub struct FlashSale {
    /// Everything put on sale: the initial stock plus top-ups.
    #[schema(required = false, minimum = 0, maximum = 100_000_000)]
    pub stock: i32,
    /// Before `end_at`.
    #[schema(required = false)]
    pub begin_at: DateTime<Utc>,
    #[schema(required = false)]
    pub end_at: DateTime<Utc>,
    /// How many Redis hash slots the sale's stock and shopper marks are spread over
    /// (default 1), so that one hot sale can use several Redis masters.
    #[schema(required = false, minimum = 1, maximum = 64)]
    pub stock_shards: i32,
}

/// Most shards one sale may have.
pub const MAX_SHARDS: i64 = 64;

impl FlashSale {
    /// `stock_shards` as a count (at least 1).
    pub fn shards(&self) -> u32 {
        self.stock_shards.max(1) as u32
    }
}

/// A voucher. Money is in cents.
#[derive(Clone, Debug, Serialize, PartialEq, Eq, ToSchema)]
pub struct Voucher {
    #[serde(with = "crate::id")]
    #[schema(schema_with = crate::id::schema)]
    pub id: i64,
    #[serde(with = "crate::id")]
    #[schema(schema_with = crate::id::schema)]
    pub shop_id: i64,
    #[schema(min_length = 1, max_length = 255)]
    pub title: String,
    #[schema(required = true, max_length = 255)]
    pub sub_title: Option<String>,
    #[schema(required = true, max_length = 4096)]
    pub rules: Option<String>,
    #[schema(minimum = 0)]
    pub pay_value: i64,
    #[schema(minimum = 0)]
    pub actual_value: i64,
    #[serde(flatten)]
    #[schema(value_type = FlashSale)]
    pub flash: Option<FlashSale>,
    /// True while an admin has paused the flash sale: orders get 409 `sale_paused`
    /// on every instance. Always false for an ordinary voucher.
    pub paused: bool,
    pub created_at: DateTime<Utc>,
}

impl Voucher {
    pub fn is_flash_sale(&self) -> bool {
        self.flash.is_some()
    }
}

/// A validated `POST /api/v1/admin/vouchers` body. A voucher with `stock`,
/// `begin_at` and `end_at` is a flash sale; one without them is ordinary. Its
/// OpenAPI schema (below) states what [`NewVoucher::parse`] accepts.
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

/// Characters Rust's `str::trim` removes (Unicode White_Space), for the patterns
/// below: spelt out because `\s` means a different set in each regex dialect.
const WHITE_SPACE: &str = "\\u0009-\\u000d \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";

impl utoipa::ToSchema for NewVoucher {}

impl utoipa::PartialSchema for NewVoucher {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        let id = serde_json::to_value(crate::id::input_schema()).expect("a schema serialises");
        let money = json!({"type": "integer", "format": "int64", "minimum": 0, "maximum": MAX_MONEY});
        let (one, many) = (refused_class(Lines::One), refused_class(Lines::Many));
        let instant = json!({"type": "string", "format": "date-time", "pattern": validate::TIME_YEAR_PATTERN,
                          "description": "RFC 3339 with an offset, in the years 0001 to 9998 (so that it is one \
                                          in UTC too); `begin_at` before `end_at`."});
        // A field that is null counts as absent (`validate::optional`): the ordinary
        // voucher has none of the flash-sale fields, or only nulls.
        let schema = json!({
            "description": "A `POST /api/v1/admin/vouchers` body: a flash sale (`stock`, `begin_at` and \
                            `end_at`, `begin_at` < `end_at`) or an ordinary voucher (none of the three). \
                            A field that is null counts as absent. Money is in cents.",
            "examples": [{"shop_id": "1", "title": "100 off 50", "pay_value": 5000, "actual_value": 10000,
                          "stock": 100, "begin_at": "2026-01-01T00:00:00+08:00", "end_at": "2099-01-01T00:00:00Z"}],
            "allOf": [
                {
                    "type": "object",
                    "required": ["shop_id", "title", "pay_value", "actual_value"],
                    "properties": {
                        "shop_id": id,
                        "title": {"type": "string", "minLength": 1, "maxLength": 255,
                                  "pattern": format!("^[^{one}]*[^{one}{WHITE_SPACE}][^{one}]*$"),
                                  "description": "Not blank; one line: no control characters, no \
                                                  bidirectional formatting characters."},
                        "sub_title": {"type": ["string", "null"], "maxLength": 255, "pattern": format!("^[^{one}]*$"),
                                      "description": "One line, as `title`."},
                        "rules": {"type": ["string", "null"], "maxLength": 4096, "pattern": format!("^[^{many}]*$"),
                                  "description": "Lines (line feeds, carriage returns and tabs allowed); no other \
                                                  control characters, no bidirectional formatting characters."},
                        "pay_value": money,
                        "actual_value": money,
                    },
                },
                {
                    "oneOf": [
                        {
                            "title": "ordinary voucher",
                            "type": "object",
                            "properties": {
                                "stock": {"type": "null"},
                                "begin_at": {"type": "null"},
                                "end_at": {"type": "null"},
                            },
                        },
                        {
                            "title": "flash sale",
                            "type": "object",
                            "required": ["stock", "begin_at", "end_at"],
                            "properties": {
                                "stock": {"type": "integer", "format": "int32", "minimum": 0, "maximum": MAX_STOCK},
                                "begin_at": instant,
                                "end_at": instant,
                            },
                        },
                    ],
                },
            ],
        });
        serde_json::from_value(schema).expect("the NewVoucher schema is an OpenAPI schema")
    }
}

impl NewVoucher {
    /// Validates a JSON body field by field; the first problem is reported.
    pub fn parse(body: &Value) -> Result<Self, ValidationError> {
        let obj = validate::object(body)?;
        let shop_id = validate::id(required(obj, "shop_id")?, "shop_id")?;
        let title = text(obj, "title", 255, Lines::One)?.ok_or_else(|| ValidationError::new("title", "is required"))?;
        if title.trim().is_empty() {
            return Err(ValidationError::new("title", "must not be blank"));
        }
        let sub_title = text(obj, "sub_title", 255, Lines::One)?;
        let rules = text(obj, "rules", 4096, Lines::Many)?;
        let pay_value = whole(required(obj, "pay_value")?, "pay_value", 0, MAX_MONEY)?;
        let actual_value = whole(required(obj, "actual_value")?, "actual_value", 0, MAX_MONEY)?;
        let stock = optional(obj, "stock")
            .map(|v| whole(v, "stock", 0, MAX_STOCK))
            .transpose()?;
        let begin_at = optional(obj, "begin_at").map(|v| time(v, "begin_at")).transpose()?;
        let end_at = optional(obj, "end_at").map(|v| time(v, "end_at")).transpose()?;
        let stock_shards = optional(obj, "stock_shards")
            .map(|v| whole(v, "stock_shards", 1, MAX_SHARDS))
            .transpose()?;
        let flash = match (stock, begin_at, end_at) {
            (None, None, None) if stock_shards.is_some() => {
                return Err(ValidationError::new("stock_shards", "is only for a flash-sale voucher"))
            }
            (None, None, None) => None,
            (None, _, _) => {
                return Err(ValidationError::new(
                    "stock",
                    "is required for a flash-sale voucher (begin_at/end_at given)",
                ))
            }
            (Some(_), None, _) => return Err(ValidationError::new("begin_at", "is required for a flash-sale voucher")),
            (Some(_), _, None) => return Err(ValidationError::new("end_at", "is required for a flash-sale voucher")),
            (Some(stock), Some(begin_at), Some(end_at)) => {
                if begin_at >= end_at {
                    return Err(ValidationError::new("end_at", "must be after begin_at"));
                }
                Some(FlashSale {
                    stock: stock as i32,
                    begin_at,
                    end_at,
                    stock_shards: stock_shards.unwrap_or(1) as i32,
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
        assert!(e.to_string().starts_with(&format!("{}: ", e.field)), "{e}");
        e.field
    }

    /// The schema's `title` pattern (not blank, no NUL) and `parse` agree on every
    /// character of the Basic Multilingual Plane, alone and beside others.
    #[test]
    fn the_title_pattern_is_the_blank_check() {
        let schema = serde_json::to_value(<NewVoucher as utoipa::PartialSchema>::schema()).unwrap();
        let pattern = schema["allOf"][0]["properties"]["title"]["pattern"].as_str().unwrap();
        let re = regex_lite::Regex::new(pattern).unwrap();
        for c in (0..=0xffffu32).filter_map(char::from_u32) {
            for title in [c.to_string(), format!("a{c}"), format!("{c} ")] {
                let mut b = base();
                b["title"] = json!(title);
                assert_eq!(re.is_match(&title), NewVoucher::parse(&b).is_ok(), "{title:?}");
            }
        }
    }

    #[test]
    fn a_valid_flash_sale_parses() {
        let v = NewVoucher::parse(&base()).unwrap();
        let f = v.flash.unwrap();
        assert_eq!((f.stock, f.stock_shards), (10, 1));
        let mut b = base();
        b["stock_shards"] = json!(64);
        assert_eq!(NewVoucher::parse(&b).unwrap().flash.unwrap().stock_shards, 64);
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
            ("stock_shards", json!(0)),
            ("stock_shards", json!(65)),
            ("stock_shards", json!("x")),
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
