//! A sequence rule: prefix, date pattern, minimum width, time zone.
use chrono::NaiveDate;
use chrono_tz::Tz;
use serde::Serialize;
use sqlx::{PgExecutor, Row};
use utoipa::ToSchema;

/// A rule, valid (see [`Rule::parse_parts`]).
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Rule {
    #[schema(example = "waybill")]
    pub name: String,
    #[schema(example = "YD")]
    pub prefix: String,
    #[schema(example = "yyMMdd")]
    pub date_format: String,
    #[schema(minimum = 1, maximum = 18)]
    pub min_width: u32,
    #[schema(example = "Asia/Shanghai")]
    pub time_zone: String,
    #[serde(skip)]
    pub tz: Tz,
    #[serde(skip)]
    chrono_format: String,
}

/// Why a rule is refused. Displayed as `"<field>: <problem>"`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("name: must be 1-64 characters of [a-z0-9_-]")]
    Name,
    #[error("prefix: must be 1-32 characters")]
    PrefixLength,
    #[error("prefix: must not contain spaces or control characters")]
    PrefixCharacters,
    /// The pattern is unknown or does not name the day (see [`chrono_format`]).
    #[error("date_format: {0}")]
    DateFormat(String),
    #[error("min_width: must be between 1 and 18")]
    MinWidth,
    #[error("time_zone: unknown IANA time zone {0:?}")]
    TimeZone(String),
}

impl RuleError {
    /// The field the rule refused.
    pub fn field(&self) -> &'static str {
        match self {
            Self::Name => "name",
            Self::PrefixLength | Self::PrefixCharacters => "prefix",
            Self::DateFormat(_) => "date_format",
            Self::MinWidth => "min_width",
            Self::TimeZone(_) => "time_zone",
        }
    }
}

/// Translates `yyyyMMdd`-style patterns (Java's, as business rules are often written) to chrono's. A pattern
/// must name the year, month and day: numbers restart every day, so a date without
/// the day would repeat them.
pub fn chrono_format(pattern: &str) -> Result<String, String> {
    let mut out = String::new();
    let (mut year, mut month, mut day) = (false, false, false);
    let mut rest = pattern;
    while !rest.is_empty() {
        let (token, fmt) = if rest.starts_with("yyyy") {
            year = true;
            ("yyyy", "%Y")
        } else if rest.starts_with("yy") {
            year = true;
            ("yy", "%y")
        } else if rest.starts_with("MM") {
            month = true;
            ("MM", "%m")
        } else if rest.starts_with("dd") {
            day = true;
            ("dd", "%d")
        } else if let Some(sep) = ["-", "/", ".", "_"].into_iter().find(|s| rest.starts_with(s)) {
            (sep, sep)
        } else {
            return Err(format!(
                "unknown date pattern {pattern:?}: use yyyy or yy, MM, dd and the separators - / . _"
            ));
        };
        out.push_str(fmt);
        rest = &rest[token.len()..];
    }
    if !(year && month && day) {
        return Err(format!(
            "date pattern {pattern:?} must contain a year (yyyy or yy), MM and dd"
        ));
    }
    Ok(out)
}

/// A rule's name: 1-64 characters of `[a-z0-9_-]`.
pub fn check_name(name: &str) -> Result<(), RuleError> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    {
        return Err(RuleError::Name);
    }
    Ok(())
}

impl Rule {
    pub fn parse_parts(
        name: &str,
        prefix: &str,
        date_format: &str,
        min_width: i64,
        time_zone: &str,
    ) -> Result<Self, RuleError> {
        check_name(name)?;
        if prefix.is_empty() || prefix.chars().count() > 32 {
            return Err(RuleError::PrefixLength);
        }
        if prefix.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(RuleError::PrefixCharacters);
        }
        let chrono_format = chrono_format(date_format).map_err(RuleError::DateFormat)?;
        if !(1..=18).contains(&min_width) {
            return Err(RuleError::MinWidth);
        }
        let tz: Tz = time_zone
            .parse()
            .map_err(|_| RuleError::TimeZone(time_zone.to_owned()))?;
        Ok(Self {
            name: name.to_owned(),
            prefix: prefix.to_owned(),
            date_format: date_format.to_owned(),
            min_width: min_width as u32,
            time_zone: time_zone.to_owned(),
            tz,
            chrono_format,
        })
    }

    pub fn format_date(&self, day: NaiveDate) -> String {
        day.format(&self.chrono_format).to_string()
    }

    /// prefix + date + counter, zero-padded to `min_width` and wider when it outgrows it.
    pub fn number(&self, date: &str, n: u64) -> String {
        format!("{}{}{:0width$}", self.prefix, date, n, width = self.min_width as usize)
    }
}

fn from_row(row: sqlx::postgres::PgRow) -> Result<Rule, sqlx::Error> {
    let name: String = row.try_get("name")?;
    let prefix: String = row.try_get("prefix")?;
    let date_format: String = row.try_get("date_format")?;
    let min_width: i32 = row.try_get("min_width")?;
    let time_zone: String = row.try_get("time_zone")?;
    Rule::parse_parts(&name, &prefix, &date_format, min_width as i64, &time_zone)
        .map_err(|e| sqlx::Error::Decode(format!("stored rule {name} is invalid: {e}").into()))
}

pub async fn get(db: impl PgExecutor<'_>, name: &str) -> Result<Option<Rule>, sqlx::Error> {
    sqlx::query("SELECT name, prefix, date_format, min_width, time_zone FROM sequence_rules WHERE name = $1")
        .bind(name)
        .try_map(from_row)
        .fetch_optional(db)
        .await
}

pub async fn upsert(db: impl PgExecutor<'_>, r: &Rule) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO sequence_rules (name, prefix, date_format, min_width, time_zone) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (name) DO UPDATE SET prefix = $2, date_format = $3, min_width = $4, time_zone = $5, updated_at = now()",
    )
    .bind(&r.name)
    .bind(&r.prefix)
    .bind(&r.date_format)
    .bind(r.min_width as i32)
    .bind(&r.time_zone)
    .execute(db)
    .await
    .map(|_| ())
}

pub async fn insert_if_missing(db: impl PgExecutor<'_>, r: &Rule) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO sequence_rules (name, prefix, date_format, min_width, time_zone) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (name) DO NOTHING",
    )
    .bind(&r.name)
    .bind(&r.prefix)
    .bind(&r.date_format)
    .bind(r.min_width as i32)
    .bind(&r.time_zone)
    .execute(db)
    .await
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_translate_and_must_name_the_day() {
        assert_eq!(chrono_format("yyyyMMdd").unwrap(), "%Y%m%d");
        assert_eq!(chrono_format("yyMMdd").unwrap(), "%y%m%d");
        assert_eq!(chrono_format("yyyy-MM-dd").unwrap(), "%Y-%m-%d");
        for bad in ["yyyyMM", "yyyyMMddHH", "DDMMYY", "", "yyyyMMdd%n"] {
            assert!(chrono_format(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn numbers_pad_and_grow_wider_never_wrap() {
        let r = Rule::parse_parts("yd", "YD", "yyMMdd", 3, "Asia/Shanghai").unwrap();
        let d = r.format_date(NaiveDate::from_ymd_opt(2026, 11, 21).unwrap());
        assert_eq!(r.number(&d, 1), "YD261121001");
        assert_eq!(r.number(&d, 1234), "YD2611211234");
    }

    #[test]
    fn bad_rules_name_their_field() {
        let field = |r: Result<Rule, RuleError>| {
            let e = r.unwrap_err();
            assert!(e.to_string().starts_with(&format!("{}: ", e.field())), "{e}");
            e.field()
        };
        assert_eq!(field(Rule::parse_parts("a", "", "yyyyMMdd", 4, "UTC")), "prefix");
        assert_eq!(field(Rule::parse_parts("a", "P", "yyyyMMdd", 0, "UTC")), "min_width");
        assert_eq!(field(Rule::parse_parts("a", "P", "yyyyMMdd", 19, "UTC")), "min_width");
        assert_eq!(
            field(Rule::parse_parts("a", "P", "yyyyMMdd", 4, "Nowhere/City")),
            "time_zone"
        );
        assert_eq!(field(Rule::parse_parts("a", "P", "qq", 4, "UTC")), "date_format");
    }
}
