//! Pay, cancel, and unpaid orders that give their stock back.
//!
//! State changes are conditional updates (`... WHERE status = 'created'`), so pay,
//! cancel and the payment timeout racing on one order have exactly one winner. A
//! cancellation, in one transaction, sets the status, puts the unit back in
//! Postgres and records a pending stock return; then the Redis side
//! (`lua/stock_return.lua`, idempotent per order) puts the unit back on sale,
//! removes the shopper's mark and every instance's sold-out flag is cleared. A crash
//! between the two is finished by [`Lifecycle::recover_returns`].
//!
//! Lock order: a transaction that writes both a voucher's row and order rows and
//! may wait for an order row locks the voucher row first (several vouchers in
//! ascending id), then the order rows, as the worker's locked way does
//! (`worker::persist::locked`). The other order closes a cycle: a cancellation
//! holding an order row and waiting for the voucher row, the worker holding the
//! voucher row and re-inserting that order (a redelivered batch; `ON CONFLICT`
//! waits for the transaction that changed the row). Postgres then aborts one of
//! them with "deadlock detected". The worker's common way
//! (`worker::persist::unlocked`) inserts its order rows before it locks any voucher
//! row and writes no order row after: it waits for a cancellation, never the
//! other way round. Here only [`Lifecycle::cancel_in_pg`]
//! writes both; [`Lifecycle::sweep_unpaid`] and the payment timeout cancel through
//! it, one order per transaction, and [`Lifecycle::recover_returns`] and
//! [`Lifecycle::pay`] write one row per statement.
mod canceller;

use super::model::{Order, ORDER_COLUMNS};
use crate::id::{OrderId, UserId};
use crate::keys::Keys;
use crate::redis_conn::Redis;
use crate::sales::stock::{self, Event};
use anyhow::{Context, Result};
use redis::Script;
use sqlx::PgPool;
use std::sync::LazyLock;
use std::time::Duration;

pub use canceller::Canceller;

static RETURN: LazyLock<Script> = LazyLock::new(|| Script::new(crate::shard_script!("stock_return")));

#[derive(Clone)]
pub struct Lifecycle {
    pub pg: PgPool,
    pub redis: Redis,
    pub keys: Keys,
    /// Points of the shards returns go to, and where a lost shard is reported.
    pub recovery: std::sync::Arc<crate::recovery::Recovery>,
}

/// A unit on its way back to Redis.
#[derive(Clone, Copy, Debug, sqlx::FromRow)]
pub struct StockReturn {
    /// The order's id in Postgres (`stock_returns`' key; what the shard's
    /// `returned` set holds).
    pub order_id: i64,
    pub voucher_id: i64,
    pub user_id: i64,
    /// The id its shopper was given, which their mark names (differs from
    /// `order_id` for an order stored under a fresh id).
    pub mark_id: i64,
}

impl Lifecycle {
    /// `created` -> `paid` for the owner; None if the order is not theirs or not
    /// `created` (the caller explains which).
    pub async fn pay(&self, order_id: OrderId, user_id: UserId) -> Result<Option<Order>> {
        sqlx::query_as(&format!(
            "UPDATE voucher_orders SET status = 'paid', paid_at = now()
              WHERE id = (SELECT o.id FROM voucher_orders o
                           WHERE (o.id = $1 OR o.issued_id = $1) AND o.user_id = $2
                           ORDER BY (o.id = $1) DESC, o.id LIMIT 1)
                AND status = 'created'
          RETURNING {ORDER_COLUMNS}"
        ))
        .bind(order_id)
        .bind(user_id)
        .fetch_optional(&self.pg)
        .await
        .context("paying an order")
    }

    /// The Postgres half of a cancellation: status, stock +1 and a pending return,
    /// in one transaction. None if the order is not `created` (or not the owner's).
    ///
    /// Locks in the order of the module doc: the voucher row first, then the order
    /// row.
    pub async fn cancel_in_pg(&self, order_id: OrderId, by: Canceller) -> Result<Option<(Order, StockReturn)>> {
        let mut tx = self.pg.begin().await?;
        let owner = by.owner();
        // The order's row in Postgres. The owner's: the one `status::by_id` shows
        // them under `order_id`, whatever its status (so that a retried cancel
        // never reaches a second order under the same id). A timeout's: an unpaid
        // one its shopper knows as `order_id` (its consumer cancels until none is
        // left). The sweep's: the row stored under `order_id` itself. An order's
        // voucher never changes: reading it unlocked is enough to find the row to
        // lock. No row locks nothing; the update below then finds nothing either.
        let row = by.order_row(&mut tx, order_id).await?;
        let Some((stored_id, voucher_id)) = row else {
            return Ok(None);
        };
        crate::sales::pg_stock::lock_one(&mut tx, voucher_id)
            .await
            .context("locking the order's voucher")?;
        let order: Option<Order> = sqlx::query_as(&format!(
            "UPDATE voucher_orders
                SET status = 'cancelled', cancelled_at = now(),
                    cancelled_by = CASE WHEN $2::bigint IS NULL THEN 'timeout' ELSE 'owner' END
              WHERE id = $1 AND status = 'created'
          RETURNING {ORDER_COLUMNS}"
        ))
        .bind(stored_id)
        .bind(owner)
        .fetch_optional(&mut *tx)
        .await
        .context("cancelling an order")?;
        let Some(order) = order else { return Ok(None) };
        crate::sales::pg_stock::give_back_one(&mut tx, order.voucher_id.get()).await?;
        let ret = StockReturn {
            order_id: stored_id,
            voucher_id: order.voucher_id.get(),
            user_id: order.user_id.get(),
            mark_id: order.id.get(),
        };
        sqlx::query("INSERT INTO stock_returns (order_id, voucher_id, user_id) VALUES ($1, $2, $3)")
            .bind(ret.order_id)
            .bind(ret.voucher_id)
            .bind(ret.user_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await.context("committing a cancellation")?;
        Ok(Some((order, ret)))
    }

    /// The Redis half: returns true if the return is complete (now or before).
    pub async fn return_stock(&self, ret: StockReturn) -> Result<bool> {
        let k = &self.keys;
        // The unit goes back to the shard of the order's shopper, whose mark it clears.
        let shards = crate::sales::repo::shards(&self.pg, ret.voucher_id).await?;
        let shard = crate::keys::shard_of(ret.user_id, shards);
        if self.recovery.is_closed(ret.voucher_id) {
            // Its repair counts this return if Postgres had it; otherwise it is
            // applied once the sale reopens.
            return Ok(false);
        }
        let tag = crate::keys::shard_tag(ret.voucher_id, shard, shards);
        let mut conn = self.redis.conn().await?;
        let side = crate::recovery::side::Side {
            tag: &tag,
            script: &RETURN,
            keys: vec![
                k.stock_at(ret.voucher_id, shard, shards),
                k.buyers_at(ret.voucher_id, shard, shards),
                k.returned_at(ret.voucher_id, shard, shards),
                k.seq_at(ret.voucher_id, shard, shards),
                k.hist_at(ret.voucher_id, shard, shards),
            ],
            also: None,
            reads: crate::recovery::side::wrote_on_one,
        };
        let w = self
            .recovery
            .side_write(&mut conn, side, |call| {
                vec![
                    ret.order_id.to_string().into_bytes(),
                    ret.user_id.to_string().into_bytes(),
                    ret.mark_id.to_string().into_bytes(),
                    call.seqs().into_bytes(),
                    call.names(),
                    call.name.to_vec(),
                ]
            })
            .await
            .context("stock_return.lua")?;
        let r = w.code;
        if !w.acked {
            // Short of its replicas: applied again later (once: the `returned` set).
            return Ok(false);
        }
        if r < 0 {
            tracing::warn!(
                order_id = ret.order_id,
                voucher_id = ret.voucher_id,
                "the shard is lost or went back in time; the return stays pending until it is repaired"
            );
            self.recovery.lost(
                ret.voucher_id,
                if r == -4 {
                    "a shard went back in time (a stock return found it behind)"
                } else {
                    "a shard's stock is missing in Redis (a stock return found it)"
                },
            );
            return Ok(false);
        }
        sqlx::query("UPDATE stock_returns SET done_at = now() WHERE order_id = $1 AND done_at IS NULL")
            .bind(ret.order_id)
            .execute(&self.pg)
            .await
            .context("marking a stock return done")?;
        if r == 1 {
            if let Err(e) = stock::publish(&self.redis, &self.keys, Event::Stock(ret.voucher_id)).await {
                tracing::warn!(error = %format!("{e:#}"), "could not announce returned stock");
            }
        }
        Ok(true)
    }

    /// Cancels and returns the stock; None if the order was not `created`.
    pub async fn cancel(&self, order_id: OrderId, by: Canceller) -> Result<Option<Order>> {
        let Some((order, ret)) = self.cancel_in_pg(order_id, by).await? else {
            return Ok(None);
        };
        if let Err(e) = self.return_stock(ret).await {
            // Committed in Postgres: the recovery sweeper finishes the Redis side.
            tracing::warn!(order_id = order_id.get(), error = %format!("{e:#}"), "stock return left pending for recovery");
        }
        Ok(Some(order))
    }

    /// Finishes returns a crash interrupted (older than `min_age`). Returns how many.
    pub async fn recover_returns(&self, min_age: Duration) -> Result<usize> {
        let pending: Vec<StockReturn> = sqlx::query_as(
            "SELECT r.order_id, r.voucher_id, r.user_id, coalesce(o.issued_id, o.id) AS mark_id
               FROM stock_returns r JOIN voucher_orders o ON o.id = r.order_id
              WHERE r.done_at IS NULL AND r.created_at < now() - make_interval(secs => $1)
              ORDER BY r.created_at LIMIT 1000",
        )
        .bind(min_age.as_secs_f64())
        .fetch_all(&self.pg)
        .await
        .context("finding pending stock returns")?;
        let mut done = 0;
        for ret in pending {
            if self.return_stock(ret).await? {
                done += 1;
            }
        }
        Ok(done)
    }

    /// Finishes stock top-ups a crash or an outage interrupted (older than
    /// `min_age`; see [`crate::sales::topup`]). Returns how many.
    pub async fn recover_topups(&self, min_age: Duration) -> Result<usize> {
        crate::sales::topup::recover(&self.pg, &self.redis, &self.keys, &self.recovery, min_age).await
    }

    /// Backstop for lost timeout messages: cancels orders still `created` that
    /// were persisted longer than `age` ago. Returns how many.
    ///
    /// Postgres's clock alone judges the age (`persisted_at` is its `now()` at the
    /// insert, compared with its `now()`), as RabbitMQ's judges the payment timeout
    /// (a relative TTL from the moment the worker committed). `created_at` comes
    /// from the clock of the instance that admitted the order: one running minutes
    /// behind would have its orders cancelled as soon as they were stored.
    pub async fn sweep_unpaid(&self, age: Duration) -> Result<usize> {
        let stale: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM voucher_orders
              WHERE status = 'created' AND persisted_at < now() - make_interval(secs => $1)
              ORDER BY persisted_at LIMIT 1000",
        )
        .bind(age.as_secs_f64())
        .fetch_all(&self.pg)
        .await
        .context("finding unpaid orders")?;
        let mut n = 0;
        for id in stale {
            if self.cancel(OrderId::new(id), Canceller::Stale).await?.is_some() {
                n += 1;
            }
        }
        Ok(n)
    }
}
