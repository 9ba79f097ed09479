//! The JSON bodies the sequence routes take and give. Request bodies are checked
//! field by field (see [`crate::validate`]), in the order the routes always checked
//! them, so that the first problem reported does not change.
use crate::validate::{self, string, whole, ValidationError};
use serde::Serialize;
use serde_json::Value;
use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaType, Type};
use utoipa::openapi::RefOr;
use utoipa::ToSchema;

/// Most numbers one call may take.
pub const MAX_COUNT: i64 = 1000;

/// `PUT /api/v1/admin/sequences/{name}`: the rule to create or replace.
#[derive(Clone, Debug, PartialEq, Eq, ToSchema)]
pub struct RuleRequest {
    /// Printed before the date: no whitespace (Unicode White_Space) or control
    /// characters.
    #[schema(
        min_length = 1,
        max_length = 32,
        pattern = "^[^ \\u0000-\\u001f\\u007f-\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]+$",
        example = "YD"
    )]
    pub prefix: String,
    /// `yyyy` or `yy`, `MM` and `dd` (all three: numbers restart every day), and
    /// the separators `-` `/` `.` `_`. The pattern spells out "a year, a month and
    /// a day in any order, among more of the same" without look-aheads, which not
    /// every tool's regex dialect has.
    #[schema(schema_with = date_format_schema)]
    pub date_format: String,
    /// Digits of the counter, zero-padded; a larger number grows wider.
    #[schema(minimum = 1, maximum = 18)]
    pub min_width: i64,
    /// IANA zone whose midnight starts a new day; `SECKILL_TIME_ZONE` if absent.
    #[schema(schema_with = time_zone_schema)]
    pub time_zone: Option<String>,
}

/// `date_format`: the tokens of [`super::rule::chrono_format`] with a year, a
/// month and a day among them. Without look-aheads (not every tool's regex
/// dialect has them) the pattern spells out the six orders in which the three
/// first appear, each run before a first appearance holding only the tokens
/// already seen. `yyyy` is `yy` twice, so `yy` alone spells every year. Each token
/// is told by its first character, so a string has one reading: a backtracking
/// engine decides in linear time (one written with `(yyyy|yy|...)*` runs took
/// exponential time on a long run of `y`s that fails at its end, and hung the
/// API fuzzer).
fn date_format_schema() -> RefOr<Schema> {
    let token = |part: char| match part {
        'Y' => "yy",
        'M' => "MM",
        _ => "dd",
    };
    let run_of = |seen: &[char]| {
        let mut tokens: Vec<&str> = seen.iter().map(|&p| token(p)).collect();
        tokens.push("[-/._]");
        format!("({})*", tokens.join("|"))
    };
    let orders = ["YMD", "YDM", "MYD", "MDY", "DYM", "DMY"]
        .map(|order| {
            let order: Vec<char> = order.chars().collect();
            (0..3)
                .map(|i| format!("{}{}", run_of(&order[..i]), token(order[i])))
                .collect::<String>()
                + &run_of(&order)
        })
        .join("|");
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(format!("^({orders})$")))
        .description(Some(
            "`yyyy` or `yy`, `MM` and `dd` (all three: numbers restart every day), and the separators `-` `/` `.` `_`.",
        ))
        .examples(["yyMMdd"])
        .into()
}

/// `time_zone`: an IANA zone name chrono-tz knows (exactly as spelt there), or null.
fn time_zone_schema() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .enum_values(Some(
            chrono_tz::TZ_VARIANTS
                .iter()
                .map(|tz| Value::from(tz.name()))
                .chain([Value::Null]),
        ))
        .description(Some(
            "IANA zone whose midnight starts a new day; `SECKILL_TIME_ZONE` if absent or null.",
        ))
        .examples(["Asia/Shanghai"])
        .into()
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
    /// 1 if absent or null.
    #[schema(required = false, nullable, minimum = 1, maximum = 1000, default = 1)]
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numbers::rule::chrono_format;

    fn pattern(schema: RefOr<Schema>) -> regex_lite::Regex {
        let json = serde_json::to_value(schema).unwrap();
        regex_lite::Regex::new(json["pattern"].as_str().unwrap()).unwrap()
    }

    #[test]
    fn the_date_format_pattern_accepts_exactly_what_the_rule_does() {
        let re = pattern(date_format_schema());
        let tokens = ["yyyy", "yy", "MM", "dd", "-", "/", ".", "_", "y", "M", "d", "x"];
        // Every string of up to four tokens (and stray letters): the document and
        // the rule agree on each.
        let mut formats = vec![String::new()];
        for _ in 0..4 {
            let longer: Vec<String> = formats
                .iter()
                .flat_map(|f| tokens.iter().map(move |t| format!("{f}{t}")))
                .collect();
            formats.extend(longer);
        }
        // And long runs, which a backtracking engine once took exponential time on.
        for tail in ["MMdd", "MMddx", "MM-dd_", "dd.MM"] {
            formats.push(format!("{}{tail}", "yy".repeat(40)));
            formats.push(format!("{}{tail}", "yyyy".repeat(40)));
        }
        for f in &formats {
            assert_eq!(re.is_match(f), chrono_format(f).is_ok(), "{f:?}");
        }
    }

    /// The schema's `prefix` pattern and the rule's check agree on every character
    /// of the Basic Multilingual Plane.
    #[test]
    fn the_prefix_pattern_is_the_rule_check() {
        let schema = serde_json::to_value(<RuleRequest as utoipa::PartialSchema>::schema()).unwrap();
        let re = regex_lite::Regex::new(schema["properties"]["prefix"]["pattern"].as_str().unwrap()).unwrap();
        for c in (0..=0xffffu32).filter_map(char::from_u32) {
            let prefix = c.to_string();
            let rule = crate::numbers::Rule::parse_parts("r", &prefix, "yyMMdd", 3, "UTC");
            assert_eq!(re.is_match(&prefix), rule.is_ok(), "U+{:04X}", c as u32);
        }
    }

    #[test]
    fn every_documented_time_zone_parses() {
        let json = serde_json::to_value(time_zone_schema()).unwrap();
        for name in json["enum"].as_array().unwrap().iter().filter_map(Value::as_str) {
            assert!(name.parse::<chrono_tz::Tz>().is_ok(), "{name}");
        }
        assert!("asia/shanghai".parse::<chrono_tz::Tz>().is_err());
    }
}
