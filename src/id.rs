//! 64-bit identifiers travel as JSON strings of decimal digits (JavaScript loses
//! precision above 2^53) and are accepted as strings or numbers.
use serde::{Deserialize, Deserializer, Serializer};
use serde_json::Value;
use std::fmt;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::openapi::RefOr;

/// The OpenAPI schema of an id in a response:
/// `#[schema(schema_with = crate::id::schema)]` beside `#[serde(with = "crate::id")]`.
pub fn schema() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some("A positive 64-bit id as a string of decimal digits."))
        .pattern(Some("^[1-9][0-9]{0,18}$"))
        .examples([serde_json::json!("42")])
        .into()
}

/// What [`parse_str`] accepts, as a regular expression: up to 19 decimal digits
/// (leading zeros allowed) of a number from 1 to `i64::MAX`. JSON Schema has no
/// "at most this number" for strings, so the digits after any leading zeros are
/// either at most 18 long, or 19 and spelt out digit by digit against `i64::MAX`.
pub fn digits_pattern() -> String {
    let max = i64::MAX.to_string();
    let mut nineteen = Vec::new();
    for (i, d) in max.bytes().enumerate() {
        let lower = if i == 0 { b'1' } else { b'0' };
        // Max's digits up to here, then a smaller digit, then any digits.
        if d > lower {
            let rest = max.len() - i - 1;
            nineteen.push(format!(
                "{}[{}-{}][0-9]{{{rest}}}",
                &max[..i],
                lower as char,
                (d - 1) as char
            ));
        }
    }
    nineteen.push(max.clone());
    format!("^0*([1-9][0-9]{{0,17}}|{})$", nineteen.join("|"))
}

/// The OpenAPI schema of an id in a path or query string ([`parse_str`]): decimal
/// digits, which is all the server reads there (`42`, never `42.0`).
pub fn url_schema() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(19))
        .pattern(Some(digits_pattern()))
        .description(Some("A positive 64-bit id: decimal digits."))
        .examples([serde_json::json!("42")])
        .into()
}

/// The OpenAPI schema of an id in a request body ([`parse_value`]): decimal digits
/// in a string, or a whole number; positive either way.
pub fn input_schema() -> RefOr<Schema> {
    OneOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .max_length(Some(19))
                .pattern(Some(digits_pattern())),
        )
        .item(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                    utoipa::openapi::KnownFormat::Int64,
                )))
                .minimum(Some(1))
                .maximum(Some(i64::MAX)),
        )
        .description(Some("A positive 64-bit id: decimal digits in a string, or a number."))
        .examples([serde_json::json!("42")])
        .into()
}

/// `#[serde(with = "crate::id")]` for an id field (an `i64` or a typed id).
pub fn serialize<S: Serializer, T: fmt::Display>(id: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(id)
}

pub fn deserialize<'de, D: Deserializer<'de>, T: Parsed>(d: D) -> Result<T, D::Error> {
    let v = Value::deserialize(d)?;
    parse_value(&v).map(T::parsed).map_err(serde::de::Error::custom)
}

/// What an id is read into: an `i64`, or a typed id. Deliberately not
/// `From<i64>`, which would let any number become any kind of id through `into()`.
pub trait Parsed {
    fn parsed(id: i64) -> Self;
}

impl Parsed for i64 {
    fn parsed(id: i64) -> Self {
        id
    }
}

/// A positive 63-bit id from a JSON string or number.
pub fn parse_value(v: &Value) -> Result<i64, String> {
    match v {
        Value::String(s) => parse_str(s),
        Value::Number(n) => match as_whole(n) {
            Some(i) if i > 0 => Ok(i),
            _ => Err(format!("must be a positive 64-bit integer, got {n}")),
        },
        other => Err(format!("must be a decimal string or a number, got {}", kind(other))),
    }
}

/// A JSON number without a fractional part that fits in an `i64` (`42` or `42.0`:
/// JSON Schema's `integer` is any number whose fractional part is zero), else None.
pub fn as_whole(n: &serde_json::Number) -> Option<i64> {
    if let Some(i) = n.as_i64() {
        return Some(i);
    }
    let f = n.as_f64()?;
    // 2^63 is the first float above i64::MAX; every float below it converts exactly.
    (f.fract() == 0.0 && (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&f)).then_some(f as i64)
}

/// A positive 63-bit id from decimal digits.
pub fn parse_str(s: &str) -> Result<i64, String> {
    if s.is_empty() || s.len() > 19 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "must be decimal digits of a positive 64-bit integer, got {s:?}"
        ));
    }
    match s.parse::<i64>() {
        Ok(i) if i > 0 => Ok(i),
        _ => Err(format!("must be a positive 64-bit integer, got {s:?}")),
    }
}

pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests;

/// A typed id: a number of one kind only, parsed or read once where it enters.
/// On the wire inside the service (RabbitMQ messages, outbox entries) it is the
/// bare number (`serde(transparent)`); the API writes it as a string with
/// `#[serde(with = "crate::id")]`, and Postgres stores it as a `bigint`.
macro_rules! typed_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize, sqlx::Type)]
        #[serde(transparent)]
        #[sqlx(transparent)]
        #[repr(transparent)]
        pub struct $name(i64);

        impl $name {
            /// The id `id`, already checked (read from Postgres, or parsed).
            pub const fn new(id: i64) -> Self {
                Self(id)
            }

            /// The number, for a statement or a key.
            pub const fn get(self) -> i64 {
                self.0
            }
        }

        impl Parsed for $name {
            fn parsed(id: i64) -> Self {
                Self(id)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

typed_id!(
    /// A voucher's id (a sale's), as the areas' services take it: parsed once, where
    /// it enters (a path, a body), and a number of no other kind from then on.
    VoucherId
);

typed_id!(
    /// A shopper's id, as the areas' services take it: the caller a token names,
    /// read once where the request is authenticated.
    UserId
);

typed_id!(
    /// An order's id: the one its shopper was given (`Accepted::order_id`), parsed
    /// once from a path. Ids are unique by design but may be issued twice
    /// (a counter that went back); the order itself is an [`OrderKey`].
    OrderId
);

/// What tells one order from another: the id its shopper was given, the shopper
/// and the voucher. Two orders that share an id (issued twice) are still two
/// orders, and neither may be taken for a repeat of the other: everywhere orders
/// are compared, they are compared by this.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OrderKey {
    pub id: OrderId,
    pub user: UserId,
    pub voucher: VoucherId,
}

impl OrderKey {
    /// The key of order `id` of shopper `user` for voucher `voucher`, as a row
    /// or an entry holds them.
    pub const fn of(id: i64, user: i64, voucher: i64) -> Self {
        Self {
            id: OrderId(id),
            user: UserId(user),
            voucher: VoucherId(voucher),
        }
    }
}
