//! [`NewVoucher`]: a new voucher's body, the OpenAPI schema of what it accepts, and
//! its validation, with errors that name the field.
mod schema;

use super::limits::{
    DEFAULT_ADMIT_RATE, DEFAULT_TURN_SECS, MAX_ADMIT_RATE, MAX_DIFFICULTY, MAX_MONEY, MAX_SHARDS, MAX_STOCK,
    MAX_TURN_SECS,
};
use super::voucher::FlashSale;
use crate::admission::beacon::{Beacon, Chain, MARGIN_SECS, MAX_PERIOD};
use crate::admission::Mode;
use crate::validate::{self, optional, required, text, time, whole, Lines, ValidationError};
use serde_json::Value;

/// A validated `POST /api/v1/admin/vouchers` body. A voucher with `stock`,
/// `begin_at` and `end_at` is a flash sale; one without them is ordinary. Its
/// OpenAPI schema (`new_voucher/schema.rs`) states what [`NewVoucher::parse`] accepts.
#[derive(Clone, Debug)]
pub struct NewVoucher {
    pub shop_id: i64,
    pub title: String,
    pub sub_title: Option<String>,
    pub rules: Option<String>,
    pub pay_value: i64,
    pub actual_value: i64,
    pub flash: Option<FlashSale>,
    /// A raffle's beacon round (None for any other voucher).
    pub beacon: Option<Beacon>,
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
        let (flash, raffle_beacon) = FlashFields::read(obj)?.sale()?;
        Ok(Self {
            shop_id,
            title,
            sub_title,
            rules,
            pay_value,
            actual_value,
            flash,
            beacon: raffle_beacon,
        })
    }
}

/// A body's flash-sale fields, each checked on its own (None when absent or
/// null); [`FlashFields::sale`] checks them together.
struct FlashFields {
    stock: Option<i64>,
    begin_at: Option<chrono::DateTime<chrono::Utc>>,
    end_at: Option<chrono::DateTime<chrono::Utc>>,
    stock_shards: Option<i64>,
    admission: Option<Mode>,
    admit_rate: Option<i64>,
    turn_secs: Option<i64>,
    draw_at: Option<chrono::DateTime<chrono::Utc>>,
    pow_difficulty: Option<i64>,
    beacon: Option<(Chain, Option<i64>)>,
    address_cap: Option<i64>,
}

impl FlashFields {
    /// Reads the flash-sale fields of `obj`, in the order their problems are
    /// reported.
    fn read(obj: &serde_json::Map<String, Value>) -> Result<Self, ValidationError> {
        let stock = optional(obj, "stock")
            .map(|v| whole(v, "stock", 0, MAX_STOCK))
            .transpose()?;
        let begin_at = optional(obj, "begin_at").map(|v| time(v, "begin_at")).transpose()?;
        let end_at = optional(obj, "end_at").map(|v| time(v, "end_at")).transpose()?;
        let stock_shards = optional(obj, "stock_shards")
            .map(|v| whole(v, "stock_shards", 1, MAX_SHARDS))
            .transpose()?;
        let admission = optional(obj, "admission")
            .map(|v| {
                let s = validate::string(v, "admission")?;
                Mode::parse(s).ok_or_else(|| ValidationError::new("admission", "must be first_come, queue or raffle"))
            })
            .transpose()?;
        let admit_rate = optional(obj, "admit_rate")
            .map(|v| whole(v, "admit_rate", 1, MAX_ADMIT_RATE))
            .transpose()?;
        let turn_secs = optional(obj, "turn_secs")
            .map(|v| whole(v, "turn_secs", 1, MAX_TURN_SECS))
            .transpose()?;
        let draw_at = optional(obj, "draw_at").map(|v| time(v, "draw_at")).transpose()?;
        let pow_difficulty = optional(obj, "pow_difficulty")
            .map(|v| whole(v, "pow_difficulty", 0, MAX_DIFFICULTY))
            .transpose()?;
        // Checked whatever the mode, as the schema states it; used by a raffle only.
        let beacon = optional(obj, "beacon").map(chain_of).transpose()?;
        let address_cap = optional(obj, "address_cap")
            .map(|v| whole(v, "address_cap", 1, MAX_ADDRESS_CAP))
            .transpose()?;
        Ok(Self {
            stock,
            begin_at,
            end_at,
            stock_shards,
            admission,
            admit_rate,
            turn_secs,
            draw_at,
            pow_difficulty,
            beacon,
            address_cap,
        })
    }

    /// The flash sale these fields make, and a raffle's beacon; None for an
    /// ordinary voucher (no `stock`, `begin_at` or `end_at`), which gives none of
    /// the other fields either.
    fn sale(self) -> Result<(Option<FlashSale>, Option<Beacon>), ValidationError> {
        let admission_given = [
            ("admission", self.admission.is_some()),
            ("admit_rate", self.admit_rate.is_some()),
            ("turn_secs", self.turn_secs.is_some()),
            ("draw_at", self.draw_at.is_some()),
            ("pow_difficulty", self.pow_difficulty.is_some()),
            ("beacon", self.beacon.is_some()),
            ("address_cap", self.address_cap.is_some()),
        ];
        match (self.stock, self.begin_at, self.end_at) {
            (None, None, None) if self.stock_shards.is_some() => {
                Err(ValidationError::new("stock_shards", "is only for a flash-sale voucher"))
            }
            (None, None, None) if admission_given.iter().any(|(_, given)| *given) => {
                let field = admission_given
                    .iter()
                    .find(|(_, given)| *given)
                    .map(|(f, _)| *f)
                    .unwrap_or("admission");
                Err(ValidationError::new(field, "is only for a flash-sale voucher"))
            }
            (None, None, None) => Ok((None, None)),
            (None, _, _) => Err(ValidationError::new(
                "stock",
                "is required for a flash-sale voucher (begin_at/end_at given)",
            )),
            (Some(_), None, _) => Err(ValidationError::new("begin_at", "is required for a flash-sale voucher")),
            (Some(_), _, None) => Err(ValidationError::new("end_at", "is required for a flash-sale voucher")),
            (Some(stock), Some(begin_at), Some(end_at)) => {
                let (sale, raffle_beacon) = self.flash_sale(stock, begin_at, end_at)?;
                Ok((Some(sale), raffle_beacon))
            }
        }
    }

    /// The flash sale of `stock` units from `begin_at` to `end_at` these fields
    /// make, and a raffle's beacon (None for the other modes).
    fn flash_sale(
        self,
        stock: i64,
        begin_at: chrono::DateTime<chrono::Utc>,
        end_at: chrono::DateTime<chrono::Utc>,
    ) -> Result<(FlashSale, Option<Beacon>), ValidationError> {
        let FlashFields {
            stock_shards,
            admission,
            admit_rate,
            turn_secs,
            draw_at,
            pow_difficulty,
            beacon,
            address_cap,
            ..
        } = self;
        if begin_at >= end_at {
            return Err(ValidationError::new("end_at", "must be after begin_at"));
        }
        let admission = admission.unwrap_or_default();
        let queue = admission == Mode::Queue;
        let mut raffle_beacon = None;
        if admission == Mode::Raffle {
            // A draw in the past would close the entries at once; one at or
            // after the end would leave the winners no time to order.
            let draw = draw_at.unwrap_or(begin_at);
            if draw <= chrono::Utc::now() {
                return Err(ValidationError::new(
                    "draw_at",
                    "must be in the future (it defaults to begin_at)",
                ));
            }
            if draw >= end_at {
                return Err(ValidationError::new("draw_at", "must be before end_at"));
            }
            raffle_beacon = Some(beacon_of(beacon, draw)?);
        }
        let sale = FlashSale {
            stock: stock as i32,
            begin_at,
            end_at,
            stock_shards: stock_shards.unwrap_or(1) as i32,
            admission,
            admit_rate: queue.then(|| admit_rate.unwrap_or(DEFAULT_ADMIT_RATE) as i32),
            turn_secs: queue.then(|| turn_secs.unwrap_or(DEFAULT_TURN_SECS) as i32),
            draw_at: (admission == Mode::Raffle).then(|| draw_at.unwrap_or(begin_at)),
            pow_difficulty: if admission.gated() {
                pow_difficulty.unwrap_or(0) as i32
            } else {
                0
            },
            queue_paused_ms: 0,
            address_cap: if admission.gated() {
                address_cap.map(|c| c as i32)
            } else {
                None
            },
        };
        Ok((sale, raffle_beacon))
    }
}

/// The largest per-address cap.
const MAX_ADDRESS_CAP: i64 = 1_000_000;
/// The latest genesis a chain may name (2100-01-01).
const MAX_GENESIS: i64 = 4_102_444_800;
/// The largest round a raffle may name.
const MAX_ROUND: i64 = 1 << 40;

/// A `beacon` object's chain and round, checked on their own.
fn chain_of(v: &Value) -> Result<(Chain, Option<i64>), ValidationError> {
    let o = v
        .as_object()
        .ok_or_else(|| ValidationError::new("beacon", "must be an object"))?;
    let field =
        |name: &str| optional(o, name).ok_or_else(|| ValidationError::new(&format!("beacon.{name}"), "is required"));
    let key = validate::string(field("public_key")?, "beacon.public_key")?;
    if key.len() != 192 || !key.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(ValidationError::new(
            "beacon.public_key",
            "must be 192 lower-case hex digits (a compressed G2 point)",
        ));
    }
    let chain = Chain {
        public_key: key.to_owned(),
        genesis_time: whole(field("genesis_time")?, "beacon.genesis_time", 0, MAX_GENESIS)?,
        period: whole(field("period")?, "beacon.period", 1, i64::from(MAX_PERIOD))? as i32,
    };
    chain
        .check()
        .map_err(|e| ValidationError::new("beacon.public_key", e.to_string()))?;
    let round = optional(o, "round")
        .map(|v| whole(v, "beacon.round", 1, MAX_ROUND))
        .transpose()?;
    Ok((chain, round))
}

/// A raffle's beacon: the chain given (quicknet if none) and its round (the
/// first after `draw` if none), which must be published after `draw`.
fn beacon_of(
    given: Option<(Chain, Option<i64>)>,
    draw: chrono::DateTime<chrono::Utc>,
) -> Result<Beacon, ValidationError> {
    let (chain, round) = given.unwrap_or_else(|| (Chain::quicknet(), None));
    // Published at least MARGIN_SECS after the entries close.
    let after = draw + chrono::Duration::seconds(MARGIN_SECS);
    let first = chain.first_round_from(after);
    let round = round.unwrap_or(first);
    if chain.round_at(round) < after {
        return Err(ValidationError::new(
            "beacon.round",
            format!(
                "must be published at least {MARGIN_SECS} s after draw_at: round {round} is at {}, the first such \
                 round is {first}",
                chain.round_at(round).to_rfc3339()
            ),
        ));
    }
    Ok(Beacon::new(chain, round))
}
