//! Placing an order: the hot path.
//!
//! No Postgres: the voucher and its sale window come from the in-process cache. One
//! Redis round trip: `lua/reserve.lua` (EVALSHA) admits or refuses the order and, when
//! it admits it, has already put it in the voucher's outbox. The order id comes
//! from the ID worker's in-memory block.
use super::id_worker::IdWorker;
use crate::clock::Clock;
use crate::clock_skew::ClockSkew;
use crate::keys::Keys;
use crate::metrics::Metrics;
use crate::redis_conn::Redis;
use crate::voucher::cache::VoucherCache;
use anyhow::Context;
use chrono::{DateTime, Utc};
use redis::Script;
use std::sync::{Arc, LazyLock};

static RESERVE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/reserve.lua")));

/// Why an order was not placed. Every refusal but `Failed` is an answer to the
/// shopper; `Unavailable` ones are worth retrying (the order may not exist yet).
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("no voucher with this id")]
    VoucherNotFound,
    #[error("this voucher is not sold in a flash sale")]
    NotAFlashSale,
    #[error("the sale starts at {}", .0.to_rfc3339())]
    NotStarted(DateTime<Utc>),
    #[error("the sale ended at {}", .0.to_rfc3339())]
    Ended(DateTime<Utc>),
    #[error("this sale is paused; try again later")]
    Paused,
    #[error("this sale is sold out")]
    SoldOut,
    #[error("you already have an order for this voucher")]
    AlreadyOrdered,
    /// Try again after `retry_after_secs`.
    #[error("{message}")]
    Unavailable {
        message: &'static str,
        retry_after_secs: u64,
    },
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

impl Refusal {
    /// The label of `seckill_order_requests_total`.
    pub fn outcome(&self) -> &'static str {
        match self {
            Refusal::VoucherNotFound => "not_found",
            Refusal::NotAFlashSale => "not_a_flash_sale",
            Refusal::NotStarted(_) => "not_started",
            Refusal::Ended(_) => "ended",
            Refusal::Paused => "paused",
            Refusal::SoldOut => "sold_out",
            Refusal::AlreadyOrdered => "already_ordered",
            Refusal::Unavailable { .. } => "unavailable",
            Refusal::Failed(_) => "error",
        }
    }
}

fn unavailable(message: &'static str, retry_after_secs: u64) -> Refusal {
    Refusal::Unavailable {
        message,
        retry_after_secs,
    }
}

/// What placing an order needs.
#[derive(Clone)]
pub struct OrderDesk {
    pub cache: Arc<VoucherCache>,
    pub ids: Arc<IdWorker>,
    pub redis: Redis,
    pub keys: Keys,
    pub clock: Clock,
    pub clock_skew: Arc<ClockSkew>,
    pub metrics: Arc<Metrics>,
}

impl OrderDesk {
    /// Places `user_id`'s order for `voucher_id`; returns the new order's id.
    pub async fn place(&self, voucher_id: i64, user_id: i64) -> Result<i64, Refusal> {
        let entry = self.cache.get(voucher_id).ok_or(Refusal::VoucherNotFound)?;
        let flash = entry.voucher.flash.as_ref().ok_or(Refusal::NotAFlashSale)?;
        if entry.voucher.paused {
            // From the cache, which every instance keeps within a second of Postgres.
            return Err(Refusal::Paused);
        }
        if self.clock_skew.refusing() {
            // Too far from Postgres's clock to judge the sale window: other instances sell.
            return Err(unavailable(
                "this server's clock is off; try again",
                crate::clock_skew::RETRY_AFTER_SECS,
            ));
        }
        let now = self.clock.now();
        if now < flash.begin_at {
            return Err(Refusal::NotStarted(flash.begin_at));
        }
        if now >= flash.end_at {
            return Err(Refusal::Ended(flash.end_at));
        }
        let (known_sold_out, seen) = entry.read_sold_out_flag();
        if known_sold_out {
            return Err(Refusal::SoldOut);
        }
        if !self.redis.identity().get().is_some_and(|v| !v.repairing) {
            // Redis may have gone back in time: no id, no order until it is repaired.
            return Err(unavailable(
                "this sale is temporarily unavailable while its state is checked",
                1,
            ));
        }
        let order_id = self.ids.next_id().await.map_err(|e| {
            tracing::warn!(error = %format!("{e:#}"), "no order id");
            unavailable("no order id can be issued right now", 1)
        })?;
        match self
            .reserve(voucher_id, user_id, order_id, now.timestamp_millis())
            .await?
        {
            Reservation::Accepted { .. } => {
                entry.in_stock(seen);
                Ok(order_id)
            }
            Reservation::SoldOut => {
                entry.mark_sold_out(seen);
                Err(Refusal::SoldOut)
            }
            Reservation::AlreadyOrdered => Err(Refusal::AlreadyOrdered),
            Reservation::NotLoaded => {
                tracing::error!(
                    voucher_id,
                    "flash-sale stock missing in Redis; refusing orders until it is rebuilt"
                );
                self.redis.identity().distrust();
                Err(unavailable("this sale is temporarily unavailable", 2))
            }
            Reservation::Unverified => Err(unavailable(
                "this sale is temporarily unavailable while its state is checked",
                1,
            )),
        }
    }

    /// Runs the script once.
    pub async fn reserve(
        &self,
        voucher_id: i64,
        user_id: i64,
        order_id: i64,
        created_ms: i64,
    ) -> anyhow::Result<Reservation> {
        let k = &self.keys;
        let Some((mut conn, _epoch)) = self.redis.verified().await? else {
            return Ok(Reservation::Unverified);
        };
        let _timer = self.metrics.reserve_seconds.start_timer();
        let code: i64 = RESERVE
            .key(k.stock(voucher_id))
            .key(k.buyers(voucher_id))
            .key(k.orders(voucher_id))
            .key(k.outbox(voucher_id))
            .arg(user_id)
            .arg(order_id)
            .arg(created_ms)
            .arg(voucher_id)
            .invoke_async(&mut conn)
            .await
            .context("reserve.lua")?;
        Ok(match code {
            n if n >= 0 => Reservation::Accepted { stock_left: n },
            -1 => Reservation::SoldOut,
            -2 => Reservation::AlreadyOrdered,
            -3 => Reservation::NotLoaded,
            other => anyhow::bail!("reserve.lua returned unknown code {other}"),
        })
    }
}

/// What `reserve.lua` decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Reservation {
    Accepted {
        stock_left: i64,
    },
    SoldOut,
    AlreadyOrdered,
    /// Redis has no stock for the voucher (it lost it): refuse, never sell from nothing.
    NotLoaded,
    /// The Redis server is not verified (it may have gone back in time, and the
    /// sales are being repaired): refuse, never sell from a state that went back.
    Unverified,
}
