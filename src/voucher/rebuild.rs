//! Rebuilding a flash sale in Redis after Redis lost it (flush, restart without
//! persistence, failover).
//!
//! While the stock key is missing, `reserve.lua` answers "not loaded" and the API
//! refuses orders with 503: nothing is sold from nothing. A singleton job notices
//! the loss, waits until the orders already on their way (in RabbitMQ, in the
//! worker's hands) are persisted, and then rebuilds from Postgres: the shoppers'
//! marks (live orders), the order index, the set of returned units (cancelled
//! orders), and last the stock key, whose presence re-opens the sale.
//!
//! What cannot be rebuilt: orders Redis admitted (202) but lost before the relay
//! published them. See the README's durability section.
use super::stock::{self, Event};
use crate::broker::Broker;
use crate::keys::Keys;
use crate::redis_conn::Redis;
use crate::voucher::cache::VoucherCache;
use anyhow::{Context, Result};
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use sqlx::PgPool;
use std::sync::Arc;
use std::time::Duration;

pub struct Rebuilder {
    pub redis: Redis,
    pub keys: Keys,
    pub pg: PgPool,
    pub cache: Arc<VoucherCache>,
    pub broker: Arc<Broker>,
    /// How long the persisted count must stay still to call the pipeline drained.
    pub quiet: Duration,
}

impl Rebuilder {
    /// One round: rebuilds every flash sale whose stock key is missing.
    pub async fn round(&self) -> Result<usize> {
        let sales: Vec<i64> = self.cache.flash_sales().iter().map(|e| e.voucher.id).collect();
        if sales.is_empty() {
            return Ok(0);
        }
        let mut pipe = redis::pipe();
        for v in &sales {
            pipe.exists(self.keys.stock(*v));
        }
        let mut conn = self.redis.conn().await?;
        let present: Vec<bool> = pipe.query_async(&mut conn).await.context("checking stock keys")?;
        let lost: Vec<i64> = sales
            .into_iter()
            .zip(present)
            .filter(|(_, p)| !p)
            .map(|(v, _)| v)
            .collect();
        if lost.is_empty() {
            return Ok(0);
        }
        tracing::error!(vouchers = ?lost, "Redis lost flash-sale stock; orders refused with 503 until rebuilt");
        self.wait_for_drain(&lost).await?;
        for v in &lost {
            self.rebuild(*v).await?;
        }
        Ok(lost.len())
    }

    /// Until the orders queue is empty and the vouchers' persisted orders stop changing.
    async fn wait_for_drain(&self, vouchers: &[i64]) -> Result<()> {
        let count = || async {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM voucher_orders WHERE voucher_id = ANY($1)")
                .bind(vouchers)
                .fetch_one(&self.pg)
                .await
        };
        let mut last = -1;
        loop {
            let ready = self.queued().await?;
            let now = count().await?;
            if ready == 0 && now == last {
                return Ok(());
            }
            last = now;
            tokio::time::sleep(self.quiet).await;
        }
    }

    async fn queued(&self) -> Result<u32> {
        let (conn, ch) = self.broker.open().await?;
        let q = ch
            .queue_declare(
                &self.broker.keys().orders_queue(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .context("reading the orders queue depth")?;
        let _ = conn.close(200, "checked").await;
        Ok(q.message_count())
    }

    async fn rebuild(&self, voucher: i64) -> Result<()> {
        let k = &self.keys;
        let mut tx = self.pg.begin().await?;
        // Locked: a cancellation (stock + 1, pending return) cannot interleave.
        let Some(stock_left): Option<i32> =
            sqlx::query_scalar("SELECT stock FROM seckill_vouchers WHERE voucher_id = $1 FOR UPDATE")
                .bind(voucher)
                .fetch_optional(&mut *tx)
                .await?
        else {
            return Ok(());
        };
        let orders: Vec<(i64, i64, chrono::DateTime<chrono::Utc>, String)> =
            sqlx::query_as("SELECT id, user_id, created_at, status FROM voucher_orders WHERE voucher_id = $1")
                .bind(voucher)
                .fetch_all(&mut *tx)
                .await?;
        // Postgres's stock already counts these returns: Redis must not add them again.
        sqlx::query("UPDATE stock_returns SET done_at = now() WHERE voucher_id = $1 AND done_at IS NULL")
            .bind(voucher)
            .execute(&mut *tx)
            .await?;
        let mut conn = self.redis.conn().await?;
        for chunk in orders.chunks(1000) {
            let mut pipe = redis::pipe();
            for (id, user, at, status) in chunk {
                pipe.hset(k.orders(voucher), id, format!("{user}:{}", at.timestamp_millis()))
                    .ignore();
                match status.as_str() {
                    "created" | "paid" => {
                        pipe.hset(k.buyers(voucher), user, id).ignore();
                    }
                    "cancelled" => {
                        pipe.sadd(k.returned(voucher), id).ignore();
                    }
                    _ => {}
                }
            }
            let () = pipe.query_async(&mut conn).await.context("rebuilding shopper marks")?;
        }
        tx.commit().await?;
        // Last: the stock key re-opens the sale (NX: never over a key that came back).
        stock::load(&self.redis, k, voucher, stock_left).await?;
        stock::publish(&self.redis, k, Event::Stock(voucher)).await?;
        tracing::warn!(
            voucher,
            stock_left,
            orders = orders.len(),
            "flash sale rebuilt in Redis from Postgres"
        );
        Ok(())
    }
}
