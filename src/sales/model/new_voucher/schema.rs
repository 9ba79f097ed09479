//! The OpenAPI schema of a [`NewVoucher`] body: what [`NewVoucher::parse`]
//! accepts, for the readers of the API document.
use super::{NewVoucher, MAX_ADDRESS_CAP, MAX_GENESIS, MAX_ROUND};
use crate::admission::beacon::MAX_PERIOD;
use crate::sales::model::limits::{MAX_ADMIT_RATE, MAX_DIFFICULTY, MAX_MONEY, MAX_SHARDS, MAX_STOCK, MAX_TURN_SECS};
use crate::validate::{self, refused_class, Lines};
use serde_json::{json, Value};

/// Characters Rust's `str::trim` removes (Unicode White_Space), for the patterns
/// below: spelt out because `\s` means a different set in each regex dialect.
const WHITE_SPACE: &str = "\\u0009-\\u000d \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";

impl utoipa::ToSchema for NewVoucher {}

impl utoipa::PartialSchema for NewVoucher {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        let schema = json!({
            "description": "A `POST /api/v1/admin/vouchers` body: a flash sale (`stock`, `begin_at` and \
                            `end_at`, `begin_at` < `end_at`) or an ordinary voucher (none of the three). \
                            A field that is null counts as absent. Money is in cents.",
            "examples": [{"shop_id": "1", "title": "100 off 50", "pay_value": 5000, "actual_value": 10000,
                          "stock": 100, "begin_at": "2026-01-01T00:00:00+08:00", "end_at": "2099-01-01T00:00:00Z"}],
            "allOf": [
                every_voucher(),
                {
                    "oneOf": [ordinary(), flash_sale()],
                },
            ],
        });
        serde_json::from_value(schema).expect("the NewVoucher schema is an OpenAPI schema")
    }
}

/// What every voucher has: its shop, its texts and its prices.
fn every_voucher() -> Value {
    let id = serde_json::to_value(crate::id::input_schema()).expect("a schema serialises");
    let money = json!({"type": "integer", "format": "int64", "minimum": 0, "maximum": MAX_MONEY});
    let (one, many) = (refused_class(Lines::One), refused_class(Lines::Many));
    json!({
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
    })
}

/// The ordinary voucher's branch of the `oneOf`.
fn ordinary() -> Value {
    // A field that is null counts as absent (`validate::optional`): the ordinary
    // voucher has none of the flash-sale fields, or only nulls.
    json!({
        "title": "ordinary voucher",
        "type": "object",
        "properties": {
            "stock": {"type": "null"},
            "begin_at": {"type": "null"},
            "end_at": {"type": "null"},
            "stock_shards": {"type": "null"},
            "admission": {"type": "null"},
            "admit_rate": {"type": "null"},
            "turn_secs": {"type": "null"},
            "draw_at": {"type": "null"},
            "pow_difficulty": {"type": "null"},
            "beacon": {"type": "null"},
            "address_cap": {"type": "null"},
        },
    })
}

/// The flash sale's branch of the `oneOf`: its stock and window, and who may
/// order and how.
fn flash_sale() -> Value {
    let instant = json!({"type": "string", "format": "date-time", "pattern": validate::TIME_YEAR_PATTERN,
                      "description": "RFC 3339 with an offset, in the years 0001 to 9998 (so that it is one \
                                      in UTC too); `begin_at` before `end_at`."});
    json!({
        "title": "flash sale",
        "type": "object",
        "required": ["stock", "begin_at", "end_at"],
        "properties": {
            "stock": {"type": "integer", "format": "int32", "minimum": 0, "maximum": MAX_STOCK},
            "begin_at": instant,
            "end_at": instant,
            "stock_shards": {"type": ["integer", "null"], "format": "int32", "minimum": 1,
                             "maximum": MAX_SHARDS, "description": "default 1"},
            "admission": {"type": ["string", "null"], "enum": ["first_come", "queue", "raffle", null],
                          "description": "who may order (default `first_come`); a `queue` or \
                                          `raffle` sale takes orders only with an admission token"},
            "admit_rate": {"type": ["integer", "null"], "format": "int32", "minimum": 1,
                           "maximum": MAX_ADMIT_RATE,
                           "description": "a queue's shoppers admitted per second (default \
                                           100); ignored for the other modes"},
            "turn_secs": {"type": ["integer", "null"], "format": "int32", "minimum": 1,
                          "maximum": MAX_TURN_SECS,
                          "description": "how long a queue's admitted shopper may order, from \
                                          their admission (default 300); ignored for the \
                                          other modes"},
            "draw_at": {"type": ["string", "null"], "format": "date-time",
                        "pattern": validate::TIME_YEAR_PATTERN,
                        "description": "a raffle's draw, when its entries close (default \
                                        `begin_at`): for a raffle, in the future and \
                                        before `end_at`; ignored for the other modes"},
            "pow_difficulty": {"type": ["integer", "null"], "format": "int32", "minimum": 0,
                               "maximum": MAX_DIFFICULTY,
                               "description": "joining the queue or entering the raffle needs \
                                               an ALTCHA proof of work of this `maxnumber` \
                                               (default 0: none); ignored for `first_come`"},
            "address_cap": {"type": ["integer", "null"], "format": "int32", "minimum": 1,
                            "maximum": MAX_ADDRESS_CAP,
                            "description": "the queue's places or the raffle's entries one \
                                            client address may take (default: no cap; the \
                                            address is the one SECKILL_TRUSTED_PROXIES \
                                            lets the service see); ignored for `first_come`"},
            "beacon": beacon(),
        },
    })
}

/// A raffle's `beacon` object: a drand chain and its round.
fn beacon() -> Value {
    json!({
        "type": ["object", "null"],
        "description": "the public randomness a raffle draws with: a drand \
                        chain (default: the League of Entropy's quicknet) and \
                        its round, published at least 10 s after `draw_at` \
                        (default: the first such round); checked in every \
                        mode, used by a raffle only",
        "required": ["public_key", "genesis_time", "period"],
        "properties": {
            "public_key": {"type": "string", "pattern": "^[0-9a-f]{192}$",
                           "description": "the chain's BLS12-381 public key \
                                           (a compressed G2 point)"},
            "genesis_time": {"type": "integer", "format": "int64",
                             "minimum": 0, "maximum": MAX_GENESIS,
                             "description": "unix seconds of round 1"},
            "period": {"type": "integer", "format": "int32", "minimum": 1,
                       "maximum": MAX_PERIOD, "description": "seconds between rounds"},
            "round": {"type": ["integer", "null"], "format": "int64",
                      "minimum": 1, "maximum": MAX_ROUND,
                      "description": "published at least 10 s after `draw_at`"},
        },
    })
}
