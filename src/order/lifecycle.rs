//! Pay, cancel, and unpaid orders that give their stock back.
//!
//! State changes are conditional updates (`... WHERE status = 'created'`), so pay,
//! cancel and the payment timeout racing on one order have exactly one winner. A
//! cancellation, in one transaction, sets the status, puts the unit back in
//! Postgres and records a pending stock return; then the Redis side
//! (`lua/stock_return.lua`, idempotent per order) puts the unit back on sale,
//! removes the shopper's mark and every instance's sold-out flag is cleared. A crash
//! between the two is finished by [`Lifecycle::recover_returns`].
use super::model::{Order, ORDER_COLUMNS};
use crate::keys::Keys;
use crate::redis_conn::Redis;
use crate::voucher::stock::{self, Event};
use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use redis::Script;
use sqlx::PgPool;
use std::sync::LazyLock;
use std::time::Duration;

static RETURN: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/stock_return.lua")));

/// Who cancels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Canceller {
    /// The owner, through the API.
    Owner(i64),
    /// The payment window ran out.
    Timeout,
}

#[derive(Clone)]
pub struct Lifecycle {
    pub pg: PgPool,
    pub redis: Redis,
    pub keys: Keys,
}

/// A unit on its way back to Redis.
#[derive(Clone, Copy, Debug, sqlx::FromRow)]
pub struct StockReturn {
    pub order_id: i64,
    pub voucher_id: i64,
    pub user_id: i64,
}

impl Lifecycle {
    /// `created` -> `paid` for the owner; None if the order is not theirs or not
    /// `created` (the caller explains which).
    pub async fn pay(&self, order_id: i64, user_id: i64) -> Result<Option<Order>> {
        sqlx::query_as(&format!(
            "UPDATE voucher_orders SET status = 'paid', paid_at = now()
              WHERE id = $1 AND user_id = $2 AND status = 'created'
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
    pub async fn cancel_in_pg(&self, order_id: i64, by: Canceller) -> Result<Option<(Order, StockReturn)>> {
        let mut tx = self.pg.begin().await?;
        let owner = match by {
            Canceller::Owner(u) => Some(u),
            Canceller::Timeout => None,
        };
        let order: Option<Order> = sqlx::query_as(&format!(
            "UPDATE voucher_orders SET status = 'cancelled', cancelled_at = now()
              WHERE id = $1 AND status = 'created' AND ($2::bigint IS NULL OR user_id = $2)
          RETURNING {ORDER_COLUMNS}"
        ))
        .bind(order_id)
        .bind(owner)
        .fetch_optional(&mut *tx)
        .await
        .context("cancelling an order")?;
        let Some(order) = order else { return Ok(None) };
        sqlx::query("UPDATE seckill_vouchers SET stock = stock + 1 WHERE voucher_id = $1")
            .bind(order.voucher_id)
            .execute(&mut *tx)
            .await?;
        let ret = StockReturn {
            order_id: order.id,
            voucher_id: order.voucher_id,
            user_id: order.user_id,
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
        let mut conn = self.redis.conn().await?;
        let r: i64 = RETURN
            .key(k.stock(ret.voucher_id))
            .key(k.buyers(ret.voucher_id))
            .key(k.returned(ret.voucher_id))
            .arg(ret.order_id)
            .arg(ret.user_id)
            .invoke_async(&mut conn)
            .await
            .context("stock_return.lua")?;
        if r < 0 {
            tracing::warn!(
                order_id = ret.order_id,
                voucher_id = ret.voucher_id,
                "stock not loaded in Redis; the return stays pending"
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
    pub async fn cancel(&self, order_id: i64, by: Canceller) -> Result<Option<Order>> {
        let Some((order, ret)) = self.cancel_in_pg(order_id, by).await? else {
            return Ok(None);
        };
        if let Err(e) = self.return_stock(ret).await {
            // Committed in Postgres: the recovery sweeper finishes the Redis side.
            tracing::warn!(order_id, error = %format!("{e:#}"), "stock return left pending for recovery");
        }
        Ok(Some(order))
    }

    /// Finishes returns a crash interrupted (older than `min_age`). Returns how many.
    pub async fn recover_returns(&self, min_age: Duration) -> Result<usize> {
        let pending: Vec<StockReturn> = sqlx::query_as(
            "SELECT order_id, voucher_id, user_id FROM stock_returns
              WHERE done_at IS NULL AND created_at < now() - make_interval(secs => $1)
              ORDER BY created_at LIMIT 1000",
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

    /// Backstop for lost timeout messages: cancels orders still `created` longer
    /// than `window` ago. Returns how many.
    pub async fn sweep_unpaid(&self, before: DateTime<Utc>) -> Result<usize> {
        let stale: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM voucher_orders WHERE status = 'created' AND created_at < $1 ORDER BY created_at LIMIT 1000",
        )
        .bind(before)
        .fetch_all(&self.pg)
        .await
        .context("finding unpaid orders")?;
        let mut n = 0;
        for id in stale {
            if self.cancel(id, Canceller::Timeout).await?.is_some() {
                n += 1;
            }
        }
        Ok(n)
    }
}
