//! [`Sales`]: the sales area as the edges call it. A handler reads and changes
//! vouchers, their stock in Redis and Postgres, top-ups and pauses, and a sale's
//! through it, never through a pool or a Redis connection of its own.
use super::model::{NewVoucher, Voucher};
use super::stock::{self, Event, Stats};
use super::topup::{self, NotRecorded, TopUp};
use super::{cache::VoucherCache, repo};
use crate::broker::Broker;
use crate::id::VoucherId;
use crate::keys::Keys;
use crate::recovery::Recovery;
use crate::redis_conn::Redis;
use anyhow::Result;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use std::sync::Arc;

/// Why a sale was not paused or resumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotPaused {
    NotFound,
    NotAFlashSale,
}

/// The sales area's service: what it needs, held once, for every request (a
/// clone is one reference more).
#[derive(Clone)]
pub struct Sales(Arc<SalesParts>);

/// What [`Sales`] is made of.
pub struct SalesParts {
    /// The request handlers' pool.
    pub pg: PgPool,
    pub redis: Redis,
    pub keys: Keys,
    pub broker: Arc<Broker>,
    pub recovery: Arc<Recovery>,
    pub cache: Arc<VoucherCache>,
}

impl Sales {
    pub fn new(parts: SalesParts) -> Self {
        Self(Arc::new(parts))
    }

    /// A transaction for a change that must commit with the caller's own writes
    /// (an idempotency key's answer): [`repo`] and [`topup`] take it.
    pub async fn begin(&self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        self.0.pg.begin().await
    }

    /// The voucher `id`, from Postgres.
    pub async fn get(&self, id: VoucherId) -> Result<Option<Voucher>, sqlx::Error> {
        repo::get(&self.0.pg, id.get()).await
    }

    /// The voucher `id` from this instance's cache, else from Postgres, unless
    /// Postgres said lately that there is none (`None` at once: an unknown id costs
    /// Postgres one query per id and `SECKILL_MISSING_VOUCHER_TTL_MS`, not one per
    /// request; see `voucher::cache::missing`).
    pub async fn lookup(&self, id: VoucherId) -> Result<Option<Voucher>, sqlx::Error> {
        if let Some(e) = self.0.cache.get(id.get()) {
            return Ok(Some(e.voucher.clone()));
        }
        if self.0.cache.known_missing(id.get()) {
            return Ok(None);
        }
        let marker = self.0.cache.read_marker();
        let found = repo::get(&self.0.pg, id.get()).await?;
        if found.is_none() {
            self.0.cache.note_missing(id.get(), marker);
        }
        Ok(found)
    }

    /// Every flash sale this instance's cache holds.
    pub fn flash_sales(&self) -> Vec<Arc<super::cache::Entry>> {
        self.0.cache.flash_sales()
    }

    /// Vouchers newest first, below `before`.
    pub async fn page(&self, before: Option<i64>, limit: i64) -> Result<Vec<Voucher>, sqlx::Error> {
        repo::page(&self.0.pg, before, limit).await
    }

    /// A shop's vouchers, after `after`.
    pub async fn list_by_shop(
        &self,
        shop_id: i64,
        after: Option<i64>,
        limit: i64,
    ) -> Result<Vec<Voucher>, sqlx::Error> {
        repo::list_by_shop(&self.0.pg, shop_id, after, limit).await
    }

    /// A sale's stock and orders in Redis.
    pub async fn stats(&self, id: VoucherId, shards: u32) -> Result<Stats> {
        stock::stats(&self.0.redis, &self.0.keys, id.get(), shards).await
    }

    /// Units on sale in Redis, summed over the shards.
    pub async fn remaining(&self, id: VoucherId, shards: u32) -> Result<Option<i64>> {
        stock::remaining(&self.0.redis, &self.0.keys, id.get(), shards).await
    }

    /// Puts a new sale's stock in Redis.
    pub async fn load(&self, id: VoucherId, stock: i32, shards: u32) -> Result<bool> {
        stock::load(&self.0.redis, &self.0.keys, id.get(), stock, shards).await
    }

    /// This instance's cache learns of `voucher` at once; the others through
    /// pub/sub.
    pub fn cache_now(&self, voucher: &Voucher) {
        self.0.cache.put(voucher.clone());
    }

    /// Makes `voucher` (a new one, or a change) known: this instance's cache at
    /// once, the others by pub/sub or, if that is lost, by their refresh.
    pub async fn announce(&self, voucher: &Voucher) {
        self.cache_now(voucher);
        if let Err(e) = self.publish_change(voucher.typed_id()).await {
            tracing::warn!(error = %format!("{e:#}"), "could not announce a voucher change; other instances catch up on refresh");
        }
    }

    /// Creates the voucher `new` in the caller's transaction (which may hold more,
    /// as a request's idempotency key) and, for a flash sale, loads its stock into
    /// Redis before the caller commits: a voucher that exists in Postgres always
    /// has its stock in Redis (if Redis is down, nothing is created).
    pub async fn create(&self, tx: &mut PgConnection, new: &NewVoucher) -> Result<Voucher> {
        let voucher = repo::insert(&mut *tx, new).await?;
        if let Some(flash) = &voucher.flash {
            self.load(voucher.typed_id(), flash.stock, flash.shards()).await?;
        }
        Ok(voucher)
    }

    /// Pauses (or resumes) sale `id`: committed in Postgres, then announced.
    /// Idempotent: pausing a paused sale is done as well.
    pub async fn set_paused(&self, id: VoucherId, paused: bool) -> Result<std::result::Result<Voucher, NotPaused>> {
        let mut tx = self.begin().await?;
        if repo::set_paused(&mut tx, id.get(), paused).await?.is_none() {
            return Ok(Err(match repo::get(&mut *tx, id.get()).await? {
                Some(_) => NotPaused::NotAFlashSale,
                None => NotPaused::NotFound,
            }));
        }
        let Some(voucher) = repo::get(&mut *tx, id.get()).await? else {
            return Ok(Err(NotPaused::NotFound));
        };
        tx.commit().await?;
        tracing::info!(voucher_id = id.get(), paused, "sale paused or resumed");
        self.announce(&voucher).await;
        Ok(Ok(voucher))
    }

    /// Tells every instance that `voucher` changed.
    pub async fn publish_change(&self, voucher: VoucherId) -> Result<()> {
        stock::publish(&self.0.redis, &self.0.keys, Event::Voucher(voucher.get())).await
    }

    /// Top-up `id`, done or pending.
    pub async fn top_up(&self, id: i64) -> Result<Option<TopUp>> {
        topup::get(&self.0.pg, id).await
    }

    /// The Postgres half of a top-up of `units` to the sale `id`, in the caller's
    /// transaction (which may hold more, as a request's idempotency key): the
    /// top-up and the voucher as it is after it.
    pub async fn record_top_up(
        &self,
        tx: &mut PgConnection,
        id: VoucherId,
        units: i32,
    ) -> Result<std::result::Result<(TopUp, Voucher), NotRecorded>> {
        let Some(voucher) = repo::get(&mut *tx, id.get()).await? else {
            return Ok(Err(NotRecorded::NotFound));
        };
        if voucher.flash.is_none() {
            return Ok(Err(NotRecorded::NotAFlashSale));
        }
        let top_up = match topup::record(&mut *tx, id.get(), units).await? {
            Ok(top_up) => top_up,
            Err(not) => return Ok(Err(not)),
        };
        let Some(voucher) = repo::get(&mut *tx, id.get()).await? else {
            return Ok(Err(NotRecorded::NotFound));
        };
        Ok(Ok((top_up, voucher)))
    }

    /// The Redis half of a committed top-up; whether it was applied now.
    pub async fn apply_top_up(&self, id: i64) -> Result<bool> {
        topup::apply(&self.0.pg, &self.0.redis, &self.0.keys, &self.0.recovery, id).await
    }
}
