//! Order status: Postgres has every persisted order; an order Redis accepted that
//! the worker has not written yet is `pending` and is found by its shopper's mark
//! in the sale's `buyers` hash ("order_id:created_ms").
//!
//! A shard without its stock key is lost or closed for a repair, whose rebuild
//! rewrites its marks: a lookup that finds no mark there cannot tell "no such
//! order" from "its mark is not written back yet", and answers 503 with
//! `Retry-After` ([`crate::recovery::Repairing`]), never 404: an order its owner
//! was acknowledged is never "not found". The same for a shard that no longer
//! holds a point of this process's of its history (it went back in time: its marks
//! may miss orders someone was told of): the mark is read with the points checked
//! at the same instant (`lua/shard_read.lua`), and such a shard is reported for its
//! repair.
use super::model::{Order, ORDER_COLUMNS};
use crate::id::{OrderId, UserId, VoucherId};
use crate::keys::Keys;
use crate::numbers::id_worker;
use crate::recovery::Repairing;
use crate::redis_conn::{Conn, Redis};
use crate::sales::cache::VoucherCache;
use anyhow::{Context, Result};
use chrono::{DateTime, Duration, Utc};
use sqlx::{PgExecutor, PgPool};
use std::sync::Arc;

/// The stored order its shopper knows as `order_id` (the id it was given: its own,
/// or the `issued_id` of an order stored under a fresh id), of `owner` only when
/// given, of `voucher` only when given. Should two orders hold one id (ids issued
/// twice), an owner finds their own; an admin (`owner` None) finds the one stored
/// under that id, and the other by the fresh id it was stored under, or by its
/// shopper. Always the same one of several (the one stored under that id first,
/// then the lowest stored id): what pay and cancel act on too.
pub async fn by_id(
    db: impl PgExecutor<'_>,
    order_id: OrderId,
    owner: Option<UserId>,
    voucher: Option<VoucherId>,
) -> Result<Option<Order>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {ORDER_COLUMNS} FROM voucher_orders
          WHERE (id = $1 OR issued_id = $1) AND ($2::bigint IS NULL OR user_id = $2)
            AND ($3::bigint IS NULL OR voucher_id = $3)
          ORDER BY (voucher_orders.id = $1) DESC, voucher_orders.id LIMIT 1"
    ))
    .bind(order_id)
    .bind(owner)
    .bind(voucher)
    .fetch_optional(db)
    .await
}

/// Where an order may be: Postgres, or (pending) its shopper's mark in Redis.
#[derive(Clone)]
pub struct Lookup {
    pub pg: PgPool,
    pub redis: Redis,
    pub keys: Keys,
    pub cache: Arc<VoucherCache>,
    /// Where a shard found without its stock is reported (its repair asked for).
    pub recovery: Arc<crate::recovery::Recovery>,
    /// The answers given to owners, kept until their order changes, and the long
    /// polls ([`board`]).
    pub board: Arc<Board>,
}

impl Lookup {
    /// The order from Postgres, or pending in Redis. `owner`: the shopper asking
    /// (an order of someone else's is not theirs to see, so only their shard of each
    /// sale is read); None for an admin, who may see anyone's (every shard).
    ///
    /// Postgres is read again when Redis has no mark naming the order: it may have
    /// been stored, and its mark removed by a cancellation, between the two reads.
    pub async fn find(&self, order_id: OrderId, owner: Option<UserId>) -> Result<Option<Order>> {
        if let Some(o) = by_id(&self.pg, order_id, owner, None).await? {
            return Ok(Some(o));
        }
        if let Some(o) = self.pending_by_id(order_id.get(), owner.map(UserId::get)).await? {
            return Ok(Some(o));
        }
        Ok(by_id(&self.pg, order_id, owner, None).await?)
    }

    /// Finds a pending order by id among the flash sales whose window contains the
    /// second the id was made in: by `owner`'s mark in their shard of each (one
    /// pipelined Redis call), or, for an admin who does not know the owner, by a
    /// scan of every shard's marks (`HSCAN`, a page at a time: Redis keeps no index
    /// by order id, which would cost it a hash entry per order on the hot path).
    async fn pending_by_id(&self, order_id: i64, owner: Option<i64>) -> Result<Option<Order>> {
        let Some(made) = id_worker::created_at(order_id) else {
            return Ok(None);
        };
        let candidates = self.candidates(made, owner);
        if candidates.is_empty() {
            return Ok(None);
        }
        let mut conn = self.redis.conn().await?;
        if let Some(user) = owner {
            return self.pending_by_mark(&mut conn, candidates, order_id, user).await;
        }
        self.pending_by_scan(&mut conn, candidates, order_id).await
    }

    /// The shards (voucher, shard, shards) whose marks may name an order made at
    /// `made`: of every flash sale whose window, give or take two seconds, holds
    /// that instant, `owner`'s shard, or every shard for an admin (`owner` None).
    fn candidates(&self, made: DateTime<Utc>, owner: Option<i64>) -> Vec<(i64, u32, u32)> {
        let slack = Duration::seconds(2);
        self.cache
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
            .collect()
    }

    /// The pending order `order_id` of shopper `user`, by their mark in each of
    /// `candidates` (one pipelined call).
    async fn pending_by_mark(
        &self,
        conn: &mut Conn,
        candidates: Vec<(i64, u32, u32)>,
        order_id: i64,
        user: i64,
    ) -> Result<Option<Order>> {
        // Each mark with its shard's stock key and history at one instant: a
        // shard whose stock is there and that holds this process's points had its
        // marks written back and lost none anyone here saw.
        let reads = futures::future::join_all(
            candidates
                .iter()
                .map(|&(v, k, shards)| self.read_shard(conn.clone(), v, k, shards, Some(user))),
        )
        .await;
        let mut repairing = false;
        for ((voucher_id, _, _), read) in candidates.into_iter().zip(reads) {
            let read = read?;
            if let Some((id, ms)) = read.mark.as_deref().and_then(parse_mark) {
                if id == order_id && read.open && !read.lost {
                    return Ok(Some(Order::pending(order_id, voucher_id, user, ms)));
                }
            }
            if !read.open || read.lost {
                repairing = true;
                self.unsound(voucher_id, &read);
            }
        }
        if repairing {
            Err(Repairing.into())
        } else {
            Ok(None)
        }
    }

    /// The pending order `order_id`, whoever's it is, by a scan of every mark of
    /// each of `candidates` (`HSCAN`, a page at a time).
    async fn pending_by_scan(
        &self,
        conn: &mut Conn,
        candidates: Vec<(i64, u32, u32)>,
        order_id: i64,
    ) -> Result<Option<Order>> {
        let mut repairing = false;
        for (voucher_id, k, shards) in candidates {
            let key = self.keys.buyers_at(voucher_id, k, shards);
            let mut cursor = "0".to_owned();
            loop {
                let (next, page): (String, Vec<String>) = redis::cmd("HSCAN")
                    .arg(&key)
                    .arg(&cursor)
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(conn)
                    .await
                    .context("scanning a sale's marks for a pending order")?;
                for pair in page.chunks_exact(2) {
                    if let (Ok(user), Some((id, ms))) = (pair[0].parse(), parse_mark(&pair[1])) {
                        if id == order_id {
                            return Ok(Some(Order::pending(order_id, voucher_id, user, ms)));
                        }
                    }
                }
                if next == "0" {
                    break;
                }
                cursor = next;
            }
            // After the scan: a reset during it, or a history gone back, shows here.
            let read = self.read_shard(conn.clone(), voucher_id, k, shards, None).await?;
            if !read.open || read.lost {
                repairing = true;
                self.unsound(voucher_id, &read);
            }
        }
        if repairing {
            return Err(Repairing.into());
        }
        Ok(None)
    }

    /// The shopper's order for a voucher: the live one (from Postgres, or pending in
    /// Redis), else the latest in Postgres (e.g. cancelled).
    pub async fn mine(&self, voucher: VoucherId, user: UserId) -> Result<Option<Order>> {
        let (voucher_id, user_id) = (voucher.get(), user.get());
        // Only a flash sale has state in Redis (loaded when it is created): for any
        // other voucher, or none, Postgres is the whole answer, and a missing stock
        // key means nothing.
        let flash = match self.cache.get(voucher_id) {
            Some(e) => e.voucher.flash.as_ref().map(|f| f.shards()),
            None => crate::sales::repo::flash_shards(&self.pg, voucher_id).await?,
        };
        let Some(shards) = flash else {
            return Ok(latest(&self.pg, voucher_id, user_id).await?);
        };
        let shard = crate::keys::shard_of(user_id, shards);
        let conn = self.redis.conn().await?;
        let read = self.read_shard(conn, voucher_id, shard, shards, Some(user_id)).await?;
        if let Some((order_id, ms)) = read.mark.as_deref().and_then(parse_mark) {
            if let Some(o) = by_id(&self.pg, OrderId::new(order_id), Some(user), Some(voucher)).await? {
                return Ok(Some(o));
            }
            return Ok(Some(Order::pending(order_id, voucher_id, user_id, ms)));
        }
        if !read.open || read.lost {
            self.unsound(voucher_id, &read);
            // The shard is being rebuilt (or lost): an order in flight has no mark
            // until the repair writes it back. A live order in Postgres is the
            // answer all the same.
            let live: Option<Order> = sqlx::query_as(&format!(
                "SELECT {ORDER_COLUMNS} FROM voucher_orders
                  WHERE user_id = $1 AND voucher_id = $2 AND status IN ('created', 'paid') LIMIT 1"
            ))
            .bind(user_id)
            .bind(voucher_id)
            .fetch_optional(&self.pg)
            .await?;
            return match live {
                Some(o) => Ok(Some(o)),
                None => Err(Repairing.into()),
            };
        }
        Ok(latest(&self.pg, voucher_id, user_id).await?)
    }
}

/// The shopper's latest order for a voucher in Postgres.
async fn latest(pg: &PgPool, voucher_id: i64, user_id: i64) -> Result<Option<Order>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {ORDER_COLUMNS} FROM voucher_orders WHERE user_id = $1 AND voucher_id = $2
         ORDER BY created_at DESC, voucher_orders.id DESC LIMIT 1"
    ))
    .bind(user_id)
    .bind(voucher_id)
    .fetch_optional(pg)
    .await
}

/// A shopper's mark, "order_id:created_ms" as reserve.lua writes it: the order id
/// and its time. A mark an older version wrote is the id alone: its time is then
/// the second the id carries.
fn parse_mark(v: &str) -> Option<(i64, i64)> {
    match v.split_once(':') {
        Some((id, ms)) => Some((id.parse().ok()?, ms.parse().ok()?)),
        None => {
            let id = v.parse().ok()?;
            Some((id, id_worker::created_at(id)?.timestamp_millis()))
        }
    }
}

pub mod announce;
pub mod board;
mod cached;
pub mod listen;
mod reads;
mod sale;
pub mod waits;
pub use board::Board;

#[cfg(test)]
mod tests;
