//! What the voucher routes answer besides the bare [`Voucher`]: the admin view
//! with the sale's numbers, the public view with its live stock, lists.
use super::model::Voucher;
use serde::Serialize;
use utoipa::ToSchema;

/// The admin view of a voucher: the voucher and its sale's numbers.
#[derive(Clone, Debug, Serialize, PartialEq, Eq, ToSchema)]
pub struct VoucherWithStats {
    #[serde(flatten)]
    pub voucher: Voucher,
    pub stats: SaleStats,
}

/// A sale's numbers, read when asked.
#[derive(Clone, Debug, Serialize, PartialEq, Eq, ToSchema)]
pub struct SaleStats {
    /// Units still on sale, from Redis; null for an ordinary voucher, and while
    /// Redis has no stock for the sale.
    #[schema(required = true)]
    pub stock_remaining: Option<i64>,
    /// Orders Redis admitted (whatever became of them since).
    pub orders_accepted: i64,
    /// Orders in Postgres, but for `failed` ones.
    pub orders_persisted: i64,
    /// A sharded sale's (`stock_shards` > 1) stock per shard, in shard order; their
    /// sum is `stock_remaining` (units moving between shards are in neither). Absent
    /// for a sale of one shard.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub shards: Option<Vec<ShardStats>>,
}

/// One shard of a sharded sale.
#[derive(Clone, Debug, Serialize, PartialEq, Eq, ToSchema)]
pub struct ShardStats {
    /// 0 .. stock_shards − 1.
    #[schema(minimum = 0, maximum = 63)]
    pub shard: u32,
    /// Units on sale in this shard, from Redis; null while Redis has no stock for it.
    #[schema(required = true)]
    pub stock_remaining: Option<i64>,
}

/// The public view of a voucher: a flash sale's carries its live stock.
#[derive(Clone, Debug, Serialize, PartialEq, Eq, ToSchema)]
pub struct PublicVoucher {
    #[serde(flatten)]
    pub voucher: Voucher,
    /// Flash sales only: units still on sale, from Redis (null while Redis has no
    /// stock for the sale).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stock_remaining: Option<Option<i64>>,
}

/// `GET /api/v1/vouchers?shop_id=`: one page of a shop's vouchers, in id order.
#[derive(Clone, Debug, Serialize, PartialEq, Eq, ToSchema)]
pub struct VoucherList {
    pub items: Vec<Voucher>,
    /// The id (decimal digits) to pass as `after` for the next page; null on the
    /// last one.
    #[schema(required = true, pattern = "^[1-9][0-9]{0,18}$")]
    pub next_after: Option<String>,
}

/// `POST /api/v1/admin/vouchers/{id}/stock`: the voucher, its sale's numbers and the
/// top-up. The top-up is committed in Postgres: a 200 is final, do not retry it
/// (that adds the units twice).
#[derive(Clone, Debug, Serialize, PartialEq, Eq, ToSchema)]
pub struct ToppedUp {
    #[serde(flatten)]
    pub voucher: Voucher,
    /// Null if Redis could not be read after the top-up.
    #[schema(required = true)]
    pub stats: Option<SaleStats>,
    pub top_up: TopUpView,
}

/// One top-up. `applied`: its units are on sale in Redis; if false (Redis
/// unreachable, or the sale being rebuilt), the recovery pass or the rebuild puts
/// them on sale within seconds.
#[derive(Clone, Debug, Serialize, PartialEq, Eq, ToSchema)]
pub struct TopUpView {
    #[serde(with = "crate::id")]
    #[schema(schema_with = crate::id::schema)]
    pub id: i64,
    pub units: i32,
    pub applied: bool,
}

/// `GET /api/v1/admin/vouchers`: one page of every voucher, newest first.
#[derive(Clone, Debug, Serialize, PartialEq, Eq, ToSchema)]
pub struct VoucherPage {
    pub items: Vec<Voucher>,
    /// The id (decimal digits) to pass as `before` for the next page; null on the
    /// last one.
    #[schema(required = true, pattern = "^[1-9][0-9]{0,18}$")]
    pub next_before: Option<String>,
}
