//! Order status: Postgres has every persisted order; an order Redis accepted that
//! the worker has not written yet is `pending` and is found in the voucher's
//! `orders` hash.
use super::id_worker;
use super::model::{Order, ORDER_COLUMNS};
use crate::keys::Keys;
use crate::redis_conn::Redis;
use crate::voucher::cache::VoucherCache;
use anyhow::{Context, Result};
use chrono::Duration;
use sqlx::{PgExecutor, PgPool};
use std::sync::Arc;

pub async fn by_id(db: impl PgExecutor<'_>, order_id: i64) -> Result<Option<Order>, sqlx::Error> {
    sqlx::query_as(&format!("SELECT {ORDER_COLUMNS} FROM voucher_orders WHERE id = $1"))
        .bind(order_id)
        .fetch_optional(db)
        .await
}

/// Where an order may be: Postgres, or (pending) the Redis index of its sale.
#[derive(Clone)]
pub struct Lookup {
    pub pg: PgPool,
    pub redis: Redis,
    pub keys: Keys,
    pub cache: Arc<VoucherCache>,
}

impl Lookup {
    /// The order from Postgres, or pending in Redis. `owner`: the shopper asking
    /// (an order of someone else's is not theirs to see, so only their shard of each
    /// sale is read); None for an admin, who may see anyone's (every shard).
    pub async fn find(&self, order_id: i64, owner: Option<i64>) -> Result<Option<Order>> {
        match by_id(&self.pg, order_id).await? {
            Some(o) => Ok(Some(o)),
            None => self.pending_by_id(order_id, owner).await,
        }
    }

    /// Finds a pending order by id among the flash sales whose window contains the
    /// second the id was made in (one pipelined Redis call): in `owner`'s shard of
    /// each, or every shard if the owner is not known.
    async fn pending_by_id(&self, order_id: i64, owner: Option<i64>) -> Result<Option<Order>> {
        let Some(made) = id_worker::created_at(order_id) else {
            return Ok(None);
        };
        let slack = Duration::seconds(2);
        let candidates: Vec<(i64, u32, u32)> = self
            .cache
            .flash_sales()
            .iter()
            .filter_map(|e| {
                let f = e.voucher.flash.as_ref()?;
                (f.begin_at - slack <= made && made <= f.end_at + slack).then_some((e.voucher.id, f.shards()))
            })
            .flat_map(|(v, shards)| {
                let mine = owner.map(|u| crate::keys::shard_of(u, shards));
                (0..shards)
                    .filter(move |k| mine.is_none_or(|m| m == *k))
                    .map(move |k| (v, k, shards))
            })
            .collect();
        if candidates.is_empty() {
            return Ok(None);
        }
        let mut pipe = redis::pipe();
        for (v, k, shards) in &candidates {
            pipe.hget(self.keys.orders_at(*v, *k, *shards), order_id);
        }
        let mut conn = self.redis.conn().await?;
        let found: Vec<Option<String>> = pipe
            .query_async(&mut conn)
            .await
            .context("looking up a pending order")?;
        for ((voucher_id, _, _), value) in candidates.into_iter().zip(found) {
            if let Some((user, ms)) = value.as_deref().and_then(parse_accepted) {
                return Ok(Some(Order::pending(order_id, voucher_id, user, ms)));
            }
        }
        Ok(None)
    }

    /// The shopper's order for a voucher: the live one (from Postgres, or pending in
    /// Redis), else the latest in Postgres (e.g. cancelled).
    pub async fn mine(&self, voucher_id: i64, user_id: i64) -> Result<Option<Order>> {
        let k = &self.keys;
        let shards = match self.cache.get(voucher_id) {
            Some(e) => e.voucher.flash.as_ref().map_or(1, |f| f.shards()),
            None => crate::voucher::repo::shards(&self.pg, voucher_id).await?,
        };
        let shard = crate::keys::shard_of(user_id, shards);
        let mut conn = self.redis.conn().await?;
        let live: Option<i64> = redis::cmd("HGET")
            .arg(k.buyers_at(voucher_id, shard, shards))
            .arg(user_id)
            .query_async(&mut conn)
            .await
            .context("reading the shopper's order mark")?;
        if let Some(order_id) = live {
            if let Some(o) = by_id(&self.pg, order_id).await? {
                return Ok(Some(o));
            }
            let accepted: Option<String> = redis::cmd("HGET")
                .arg(k.orders_at(voucher_id, shard, shards))
                .arg(order_id)
                .query_async(&mut conn)
                .await
                .context("reading a pending order")?;
            let ms = accepted
                .as_deref()
                .and_then(parse_accepted)
                .map(|(_, ms)| ms)
                .unwrap_or_default();
            return Ok(Some(Order::pending(order_id, voucher_id, user_id, ms)));
        }
        Ok(sqlx::query_as(&format!(
            "SELECT {ORDER_COLUMNS} FROM voucher_orders WHERE user_id = $1 AND voucher_id = $2
             ORDER BY created_at DESC, id DESC LIMIT 1"
        ))
        .bind(user_id)
        .bind(voucher_id)
        .fetch_optional(&self.pg)
        .await?)
    }
}

/// "user_id:created_ms" as reserve.lua writes it.
fn parse_accepted(v: &str) -> Option<(i64, i64)> {
    let (u, ms) = v.split_once(':')?;
    Some((u.parse().ok()?, ms.parse().ok()?))
}
