//! [`Voucher`] as stored and served, and its flash-sale part [`FlashSale`].
use crate::admission::Mode;
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

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
    /// Who may order (default `first_come`): a `queue` or `raffle` sale takes
    /// orders only with an admission token (header `X-Admission-Token`).
    #[schema(required = false)]
    pub admission: Mode,
    /// A queue's shoppers admitted per second (the admin may change it live).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, minimum = 1, maximum = 1_000_000)]
    pub admit_rate: Option<i32>,
    /// How long a queue's admitted shopper may order, from their admission.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, minimum = 1, maximum = 86_400)]
    pub turn_secs: Option<i32>,
    /// A raffle's draw: entries close then.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub draw_at: Option<DateTime<Utc>>,
    /// Joining the queue or entering the raffle needs an ALTCHA proof of work of
    /// this `maxnumber` (0: none).
    #[schema(required = false, minimum = 0, maximum = 10_000_000)]
    pub pow_difficulty: i32,
    /// A queue's places or a raffle's entries one client address may take (none: no cap).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, minimum = 1, maximum = 1_000_000)]
    pub address_cap: Option<i32>,
    /// A queue's pauses that ended, in total (ms): turns last that much longer
    /// than their admission tokens first said (`crate::admission::token`).
    #[serde(skip)]
    pub queue_paused_ms: i64,
}

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
    /// Its id as the areas' services take it.
    pub fn typed_id(&self) -> crate::id::VoucherId {
        crate::id::VoucherId::new(self.id)
    }

    pub fn is_flash_sale(&self) -> bool {
        self.flash.is_some()
    }
}
