//! Field-by-field checks of a JSON request body. Bodies are read as
//! `serde_json::Value` and checked here rather than deserialised, so that every
//! refusal names its field (`"stock: must be >= 0"`); the HTTP edge answers it
//! with 400 `validation_failed`.
use crate::id;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

/// A field that breaks a rule. Displayed as `"<field>: <message>"`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ValidationError {
    pub field: String,
    pub message: String,
}

impl ValidationError {
    pub fn new(field: &str, message: impl Into<String>) -> Self {
        Self {
            field: field.to_owned(),
            message: message.into(),
        }
    }
}

/// The body as an object.
pub fn object(body: &Value) -> Result<&Map<String, Value>, ValidationError> {
    body.as_object()
        .ok_or_else(|| ValidationError::new("body", "must be a JSON object"))
}

/// A field that is absent or null is not given.
pub fn optional<'a>(obj: &'a Map<String, Value>, field: &str) -> Option<&'a Value> {
    obj.get(field).filter(|v| !v.is_null())
}

pub fn required<'a>(obj: &'a Map<String, Value>, field: &str) -> Result<&'a Value, ValidationError> {
    optional(obj, field).ok_or_else(|| ValidationError::new(field, "is required"))
}

/// What a text field may hold besides printable characters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lines {
    /// One line (a title): no control character at all.
    One,
    /// Several lines (rules): line feeds, carriage returns and tabs too.
    Many,
}

/// The characters [`text`] refuses, as the inside of a regular expression's
/// character class (the OpenAPI document's `pattern`s).
pub fn refused_class(lines: Lines) -> &'static str {
    match lines {
        Lines::One => "\\u0000-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069",
        Lines::Many => {
            "\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069"
        }
    }
}

/// Control characters (C0, DEL, C1) and the bidirectional formatting characters
/// (marks, embeddings, overrides, isolates): invisible, they make a title read
/// differently from what it holds (an override reverses the text after it in
/// every page and log that shows it), and NUL cannot be stored in Postgres.
fn refused(c: char, lines: Lines) -> bool {
    let allowed_control = lines == Lines::Many && matches!(c, '\n' | '\r' | '\t');
    (c.is_control() && !allowed_control)
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A string of at most `max_chars` characters, if given, without the characters
/// [`refused`] names.
pub fn text(
    obj: &Map<String, Value>,
    field: &str,
    max_chars: usize,
    lines: Lines,
) -> Result<Option<String>, ValidationError> {
    let Some(s) = optional(obj, field).map(|v| string(v, field)).transpose()? else {
        return Ok(None);
    };
    if let Some(c) = s.chars().find(|c| refused(*c, lines)) {
        return Err(ValidationError::new(
            field,
            format!(
                "must not contain control or bidirectional formatting characters (found U+{:04X})",
                c as u32
            ),
        ));
    }
    if s.chars().count() > max_chars {
        return Err(ValidationError::new(
            field,
            format!("must be at most {max_chars} characters"),
        ));
    }
    Ok(Some(s.to_owned()))
}

pub fn string<'a>(v: &'a Value, field: &str) -> Result<&'a str, ValidationError> {
    v.as_str()
        .ok_or_else(|| ValidationError::new(field, format!("must be a string, got {}", id::kind(v))))
}

/// A whole number in `min..=max`. `126.0` is the whole number 126 (JSON Schema's
/// `integer`, which the OpenAPI document promises, is any number without a
/// fractional part).
pub fn whole(v: &Value, field: &str, min: i64, max: i64) -> Result<i64, ValidationError> {
    let n = match v {
        Value::Number(n) => id::as_whole(n),
        _ => {
            return Err(ValidationError::new(
                field,
                format!("must be a whole number, got {}", id::kind(v)),
            ))
        }
    };
    match n {
        Some(n) if n < min => Err(ValidationError::new(field, format!("must be >= {min}"))),
        Some(n) if n > max => Err(ValidationError::new(field, format!("must be <= {max}"))),
        Some(n) => Ok(n),
        None => Err(ValidationError::new(
            field,
            format!("must be a whole number between {min} and {max}"),
        )),
    }
}

/// A positive 64-bit id, as a string of digits or a number.
pub fn id(v: &Value, field: &str) -> Result<i64, ValidationError> {
    id::parse_value(v).map_err(|e| ValidationError::new(field, e))
}

/// The years a time may be given in ([`TIME_YEAR_PATTERN`]): any offset keeps it
/// within 0000-9999 in UTC, which is what RFC 3339 can write back. (Year 0000 at
/// +01:00 is year -1 in UTC, which would be answered as "-0001-12-31T23:00:00Z".)
pub const TIME_YEARS: std::ops::RangeInclusive<i32> = 1..=9998;

/// [`TIME_YEARS`] as the start of a pattern, for the OpenAPI document.
pub const TIME_YEAR_PATTERN: &str =
    "^(000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])-";

/// An RFC 3339 time with an offset, in the years [`TIME_YEARS`].
pub fn time(v: &Value, field: &str) -> Result<DateTime<Utc>, ValidationError> {
    use chrono::Datelike;
    let s = v
        .as_str()
        .ok_or_else(|| ValidationError::new(field, "must be an RFC 3339 time with an offset"))?;
    let t = DateTime::parse_from_rfc3339(s)
        .map_err(|_| ValidationError::new(field, format!("must be an RFC 3339 time with an offset, got {s:?}")))?;
    if !TIME_YEARS.contains(&t.year()) {
        return Err(ValidationError::new(field, "must be in the years 0001 to 9998"));
    }
    Ok(t.to_utc())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The document's year pattern is the year check.
    #[test]
    fn the_time_year_pattern_is_the_year_check() {
        let re = regex_lite::Regex::new(TIME_YEAR_PATTERN).unwrap();
        for year in 0..=9999 {
            for offset in ["Z", "+23:59", "-23:59"] {
                let t = format!("{year:04}-01-01T00:00:00{offset}");
                assert_eq!(re.is_match(&t), time(&json!(t), "t").is_ok(), "{t}");
            }
        }
        let late = time(&json!("9998-12-31T23:59:59-23:59"), "t").unwrap();
        assert!(late.to_rfc3339().starts_with("9999-"));
    }

    #[test]
    fn text_refuses_control_and_bidi_characters() {
        let obj = json!({"title": "a\u{0}b", "rules": "ab\n\tc\r\n", "rlo": "x\u{202e}y", "bell": "\u{7}",
                         "c1": "\u{85}", "isolate": "\u{2068}", "mark": "\u{200f}", "line": "a\nb",
                         "ok": "100 元 off — ünïcödé ✓ عربي"});
        let obj = obj.as_object().unwrap();
        for field in ["title", "rlo", "bell", "c1", "isolate", "mark", "line"] {
            let e = text(obj, field, 100, Lines::One).unwrap_err();
            assert_eq!(e.field, field);
        }
        for field in ["title", "rlo", "bell", "c1", "isolate", "mark"] {
            assert!(text(obj, field, 100, Lines::Many).is_err(), "{field}");
        }
        assert_eq!(text(obj, "rules", 10, Lines::Many), Ok(Some("ab\n\tc\r\n".to_owned())));
        assert!(
            text(obj, "ok", 100, Lines::One).is_ok(),
            "right-to-left script is text, not formatting"
        );
    }

    #[test]
    fn whole_numbers_may_be_written_with_a_zero_fraction() {
        assert_eq!(whole(&json!(126.0), "count", 1, 1000), Ok(126));
        assert_eq!(whole(&json!(126), "count", 1, 1000), Ok(126));
        assert!(whole(&json!(1.5), "count", 1, 1000).is_err());
        assert!(whole(&json!(1e300), "count", 1, 1000).is_err());
        assert!(whole(&json!(18446744073709551615u64), "count", 1, i64::MAX).is_err());
        assert_eq!(
            whole(&json!(2000.0), "count", 1, 1000).unwrap_err().message,
            "must be <= 1000"
        );
    }
}
