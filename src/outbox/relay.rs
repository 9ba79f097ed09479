//! One relay: [`Relay::step`] does one read-publish-acknowledge round; [`Relay::run`]
//! loops it and reconnects to RabbitMQ after failures.
use crate::broker::{publish_confirmed, Broker, ORDERS_ROUTING_KEY};
use crate::config::Settings;
use crate::keys::{Keys, RELAY_GROUP};
use crate::order::model::{OrderBatch, OrderMsg};
use crate::redis_conn::Redis;
use crate::voucher::cache::VoucherCache;
use anyhow::{Context, Result};
use lapin::options::ConfirmSelectOptions;
use lapin::{BasicProperties, Channel};
use redis::streams::{StreamId, StreamReadReply};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How long one XREADGROUP waits for new entries.
const BLOCK_MS: u64 = 200;

pub struct Relay {
    redis: Redis,
    keys: Keys,
    cache: Arc<VoucherCache>,
    broker: Arc<Broker>,
    consumer: String,
    batch: usize,
    claim_idle: Duration,
    confirm_timeout: Duration,
    metrics: Arc<crate::metrics::Metrics>,
}

/// Which entries a step reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// Entries no relay has read yet (`>`).
    New,
    /// Entries this consumer read but has not acknowledged (`0`).
    OwnPending,
}

impl Relay {
    pub fn new(
        redis: &Redis,
        keys: Keys,
        cache: Arc<VoucherCache>,
        broker: Arc<Broker>,
        consumer: String,
        settings: &Settings,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        let timeout = settings.dependency_timeout;
        Self {
            // Its own connection: XREADGROUP BLOCK must not hold up the order path.
            redis: redis.dedicated(timeout + Duration::from_millis(BLOCK_MS)),
            keys,
            cache,
            broker,
            consumer,
            batch: settings.relay_batch,
            claim_idle: settings.relay_claim_idle,
            confirm_timeout: timeout.max(Duration::from_secs(5)),
            metrics,
        }
    }

    /// Runs until `stop`. The round in progress finishes before it returns.
    pub async fn run(&self, stop: CancellationToken) {
        crate::supervise::supervise("relay", &stop, || self.run_connected(&stop)).await
    }

    async fn run_connected(&self, stop: &CancellationToken) -> Result<()> {
        let (conn, channel) = self.broker.open().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .context("enabling publisher confirms")?;
        tracing::info!(consumer = %self.consumer, "relay connected");
        // Whatever this consumer read before a failure is published again first.
        let mut read = Read::OwnPending;
        let mut last_claim = Instant::now();
        while !stop.is_cancelled() {
            if last_claim.elapsed() >= self.claim_idle / 2 {
                last_claim = Instant::now();
                if self.claim().await? > 0 {
                    read = Read::OwnPending;
                }
            }
            let n = self.step(&channel, read).await?;
            if read == Read::OwnPending && n == 0 {
                read = Read::New;
            }
            if n == 0 && self.cache.flash_sales().is_empty() {
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = tokio::time::sleep(Duration::from_millis(BLOCK_MS)) => {}
                }
            }
        }
        let _ = conn.close(200, "relay stopping").await;
        Ok(())
    }

    /// One round: read up to `batch` entries per outbox, publish them as one message,
    /// wait for the broker's confirm, then XACK and XDEL them. Returns how many
    /// orders were published.
    pub async fn step(&self, channel: &Channel, read: Read) -> Result<usize> {
        let streams: Vec<String> = self
            .cache
            .flash_sales()
            .iter()
            .map(|e| self.keys.outbox(e.voucher.id))
            .collect();
        if streams.is_empty() {
            return Ok(0);
        }
        let reply = match self.read(&streams, read).await {
            Err(e) if e.code() == Some("NOGROUP") => {
                self.ensure_groups(&streams).await?;
                self.read(&streams, read).await?
            }
            other => other.context("XREADGROUP on the outboxes")?,
        };
        let Some(reply) = reply else { return Ok(0) };
        let mut orders = Vec::new();
        let mut done: HashMap<String, Vec<String>> = HashMap::new();
        for stream in reply.keys {
            for entry in stream.ids {
                match parse_entry(&entry) {
                    Some(o) => orders.push(o),
                    // Only reserve.lua writes here; an entry it did not write is logged
                    // and dropped rather than blocking the outbox forever.
                    None => {
                        tracing::error!(stream = %stream.key, id = %entry.id, "dropping a malformed outbox entry")
                    }
                }
                done.entry(stream.key.clone()).or_default().push(entry.id);
            }
        }
        if done.is_empty() {
            return Ok(0);
        }
        if !orders.is_empty() {
            if let Err(e) = self.publish(channel, &orders).await {
                self.metrics.relay_confirms.with_label_values(&["error"]).inc();
                return Err(e);
            }
            self.metrics.relay_confirms.with_label_values(&["ack"]).inc();
            self.metrics.relay_published.inc_by(orders.len() as u64);
            let now_ms = chrono::Utc::now().timestamp_millis();
            for o in &orders {
                self.metrics
                    .relay_lag_seconds
                    .observe((now_ms - o.created_ms).max(0) as f64 / 1000.0);
            }
        }
        self.acknowledge(&done).await?;
        Ok(orders.len())
    }

    async fn read(&self, streams: &[String], read: Read) -> redis::RedisResult<Option<StreamReadReply>> {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(RELAY_GROUP)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(self.batch);
        if read == Read::New {
            cmd.arg("BLOCK").arg(BLOCK_MS);
        }
        cmd.arg("STREAMS").arg(streams);
        let id = if read == Read::New { ">" } else { "0" };
        for _ in streams {
            cmd.arg(id);
        }
        let mut conn = self.redis.conn().await?;
        cmd.query_async(&mut conn).await
    }

    async fn publish(&self, channel: &Channel, orders: &[OrderMsg]) -> Result<()> {
        let body = serde_json::to_vec(&OrderBatch {
            orders: orders.to_vec(),
        })?;
        let k = self.broker.keys();
        let props = BasicProperties::default().with_content_type("application/json".into());
        publish_confirmed(
            channel,
            &k.orders_exchange(),
            ORDERS_ROUTING_KEY,
            &body,
            props,
            self.confirm_timeout,
        )
        .await
        .context("publishing an order batch")
    }

    async fn acknowledge(&self, done: &HashMap<String, Vec<String>>) -> Result<()> {
        let mut pipe = redis::pipe();
        for (stream, ids) in done {
            pipe.cmd("XACK").arg(stream).arg(RELAY_GROUP).arg(ids).ignore();
            pipe.cmd("XDEL").arg(stream).arg(ids).ignore();
        }
        let mut conn = self.redis.conn().await?;
        let () = pipe
            .query_async(&mut conn)
            .await
            .context("acknowledging outbox entries")?;
        Ok(())
    }

    /// Takes over entries other relays left pending longer than the claim timeout.
    pub async fn claim(&self) -> Result<usize> {
        let mut claimed = 0;
        let mut conn = self.redis.conn().await?;
        for e in self.cache.flash_sales() {
            let stream = self.keys.outbox(e.voucher.id);
            let reply: redis::RedisResult<redis::Value> = redis::cmd("XAUTOCLAIM")
                .arg(&stream)
                .arg(RELAY_GROUP)
                .arg(&self.consumer)
                .arg(self.claim_idle.as_millis() as u64)
                .arg("0-0")
                .arg("COUNT")
                .arg(self.batch)
                .arg("JUSTID")
                .query_async(&mut conn)
                .await;
            match reply {
                Ok(redis::Value::Array(parts)) => {
                    if let Some(redis::Value::Array(ids)) = parts.get(1) {
                        claimed += ids.len();
                    }
                }
                Ok(_) => {}
                Err(err) if err.code() == Some("NOGROUP") => self.ensure_groups(std::slice::from_ref(&stream)).await?,
                Err(err) => return Err(err).context("XAUTOCLAIM"),
            }
        }
        if claimed > 0 {
            tracing::info!(claimed, "took over outbox entries left pending by another relay");
        }
        Ok(claimed)
    }

    /// Creates missing consumer groups (after Redis lost them).
    async fn ensure_groups(&self, streams: &[String]) -> Result<()> {
        let mut conn = self.redis.conn().await?;
        for s in streams {
            let r: redis::RedisResult<()> = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(s)
                .arg(RELAY_GROUP)
                .arg("0")
                .arg("MKSTREAM")
                .query_async(&mut conn)
                .await;
            match r {
                Ok(()) => {}
                Err(e) if e.code() == Some("BUSYGROUP") => {}
                Err(e) => return Err(e).context("XGROUP CREATE"),
            }
        }
        Ok(())
    }
}

fn parse_entry(entry: &StreamId) -> Option<OrderMsg> {
    Some(OrderMsg {
        id: entry.get("o")?,
        user_id: entry.get("u")?,
        voucher_id: entry.get("v")?,
        created_ms: entry.get("t")?,
    })
}
