//! One relay: [`Relay::step`] does one read-publish-acknowledge round; [`Relay::run`]
//! loops it and reconnects to RabbitMQ after failures.
mod claim;

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

static OUTBOX_ACK: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("../../lua/outbox_ack.lua")));

/// How long one XREADGROUP waits for new entries.
const BLOCK_MS: u64 = 200;

pub struct Relay {
    redis: Redis,
    keys: Keys,
    cache: Arc<VoucherCache>,
    broker: Arc<Broker>,
    consumer: String,
    batch: usize,
    linger: Duration,
    claim_idle: Duration,
    confirm_timeout: Duration,
    metrics: Arc<crate::metrics::Metrics>,
    /// The registry of outboxes in Redis (`<ns>:outboxes`) as last read, and when.
    registry: std::sync::Mutex<(Option<Instant>, Vec<Outbox>)>,
}

/// One outbox stream's key (a voucher's, or one of its shards').
type Outbox = String;

/// How often the relay re-reads the registry of outboxes.
const REGISTRY_EVERY: Duration = Duration::from_secs(2);

/// How long a relay on a Redis Cluster waits between reads that found nothing.
const CLUSTER_POLL_MS: u64 = 20;

/// XREADGROUP on streams of one hash slot; `block` waits up to [`BLOCK_MS`] for new
/// entries.
async fn read_group(
    conn: &mut crate::redis_conn::Conn,
    consumer: &str,
    batch: usize,
    streams: &[String],
    read: Read,
    block: bool,
) -> redis::RedisResult<Option<StreamReadReply>> {
    let mut cmd = redis::cmd("XREADGROUP");
    cmd.arg("GROUP").arg(RELAY_GROUP).arg(consumer).arg("COUNT").arg(batch);
    if read == Read::New && block {
        cmd.arg("BLOCK").arg(BLOCK_MS);
    }
    cmd.arg("STREAMS").arg(streams);
    let id = if read == Read::New { ">" } else { "0" };
    for _ in streams {
        cmd.arg(id);
    }
    cmd.query_async(conn).await
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
            linger: settings.relay_linger,
            claim_idle: settings.relay_claim_idle,
            confirm_timeout: timeout.max(Duration::from_secs(5)),
            metrics,
            registry: Default::default(),
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
            let round = Instant::now();
            let n = self.step(&channel, read).await?;
            if read == Read::OwnPending && n == 0 {
                read = Read::New;
            }
            if read == Read::New && n > 0 && n < self.batch {
                // Less than a full batch: let orders gather before the next read, so
                // that under a crowd one message (one confirm, one worker
                // transaction) carries many orders. Orders are acknowledged to
                // shoppers before they reach the outbox, so this delays only their
                // persistence, by at most the linger.
                if let Some(rest) = self.linger.checked_sub(round.elapsed()) {
                    tokio::select! {
                        _ = stop.cancelled() => {}
                        _ = tokio::time::sleep(rest) => {}
                    }
                }
            }
            if n == 0 && self.outboxes().await.is_empty() {
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = tokio::time::sleep(Duration::from_millis(BLOCK_MS)) => {}
                }
            }
        }
        let _ = conn.close(200, "relay stopping".into()).await;
        Ok(())
    }

    /// One round: read up to `batch` entries per outbox, publish them as one message,
    /// wait for the broker's confirm, then acknowledge them and drop them from the
    /// outbox (`lua/outbox_ack.lua`). Returns how many
    /// orders were published.
    pub async fn step(&self, channel: &Channel, read: Read) -> Result<usize> {
        let streams: Vec<String> = self.outboxes().await;
        if streams.is_empty() {
            return Ok(0);
        }
        // Only from a server whose state Postgres vouches for: while a repair is due
        // or under way the outboxes stay as they are, for the repair to read.
        let Some((mut conn, epoch)) = self.redis.verified().await? else {
            tokio::time::sleep(Duration::from_millis(BLOCK_MS)).await;
            return Ok(0);
        };
        let reply = match self.read(&mut conn, &streams, read).await {
            Err(e) if e.code() == Some("NOGROUP") => {
                self.ensure_groups(&streams).await?;
                self.read(&mut conn, &streams, read).await?
            }
            other => other.context("XREADGROUP on the outboxes")?,
        };
        let Some(reply) = reply else { return Ok(0) };
        let mut orders = Vec::new();
        let mut done: HashMap<String, Vec<String>> = HashMap::new();
        for stream in reply.keys {
            for entry in stream.ids {
                match parse_entry(&entry, epoch) {
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

    async fn read(
        &self,
        conn: &mut crate::redis_conn::Conn,
        streams: &[String],
        read: Read,
    ) -> redis::RedisResult<Option<StreamReadReply>> {
        // One XREADGROUP may only name streams of one hash slot on a cluster: there,
        // streams of several slots are read slot by slot, at once and without
        // blocking (a blocked read would hold up the others on its node's
        // connection), and an idle round sleeps a short poll instead.
        let mut by_slot: Vec<(u16, Vec<String>)> = Vec::new();
        for s in streams {
            let slot = if self.redis.is_cluster() {
                crate::keys::slot(s.as_bytes())
            } else {
                0
            };
            match by_slot.iter_mut().find(|g| g.0 == slot) {
                Some(g) => g.1.push(s.clone()),
                None => by_slot.push((slot, vec![s.clone()])),
            }
        }
        if by_slot.len() == 1 {
            return read_group(conn, &self.consumer, self.batch, &by_slot[0].1, read, true).await;
        }
        let replies = futures::future::try_join_all(by_slot.iter().map(|(_, group)| {
            let mut conn = conn.clone();
            async move { read_group(&mut conn, &self.consumer, self.batch, group, read, false).await }
        }))
        .await?;
        let keys: Vec<_> = replies.into_iter().flatten().flat_map(|r| r.keys).collect();
        if keys.is_empty() && read == Read::New {
            tokio::time::sleep(Duration::from_millis(CLUSTER_POLL_MS)).await;
        }
        Ok((!keys.is_empty()).then_some(StreamReadReply { keys }))
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

    /// XACK the published entries and drop what no relay needs any more
    /// (`lua/outbox_ack.lua`), one script per outbox, all at once.
    async fn acknowledge(&self, done: &HashMap<String, Vec<String>>) -> Result<()> {
        let conn = self.redis.conn().await?;
        futures::future::try_join_all(done.iter().map(|(stream, ids)| {
            let mut conn = conn.clone();
            async move {
                let _dropped: i64 = OUTBOX_ACK
                    .key(stream)
                    .arg(RELAY_GROUP)
                    .arg(ids)
                    .invoke_async(&mut conn)
                    .await?;
                Ok::<_, redis::RedisError>(())
            }
        }))
        .await
        .context("acknowledging outbox entries")?;
        Ok(())
    }

    /// The outboxes (voucher, shard) this relay reads: every shard of the flash sales
    /// in the voucher cache and those in Redis's registry of outboxes, so that orders
    /// keep flowing even while the cache is empty (Postgres unreachable since start-up).
    async fn outboxes(&self) -> Vec<Outbox> {
        let mut ids: Vec<Outbox> = self
            .cache
            .flash_sales()
            .iter()
            .flat_map(|e| {
                let shards = e.voucher.flash.as_ref().map_or(1, |f| f.shards());
                let id = e.voucher.id;
                (0..shards).map(move |k| (id, k, shards))
            })
            .map(|(id, k, shards)| self.keys.outbox_at(id, k, shards))
            .collect();
        let stale = {
            let registry = self.registry.lock().expect("registry poisoned");
            ids.extend(registry.1.iter().cloned());
            registry.0.is_none_or(|at| at.elapsed() >= REGISTRY_EVERY)
        };
        if stale {
            let read: redis::RedisResult<Vec<String>> = async {
                let mut conn = self.redis.conn().await?;
                redis::cmd("SMEMBERS")
                    .arg(self.keys.outboxes())
                    .query_async(&mut conn)
                    .await
            }
            .await;
            let mut registry = self.registry.lock().expect("registry poisoned");
            registry.0 = Some(Instant::now());
            match read {
                Ok(listed) => {
                    let listed: Vec<Outbox> = listed.iter().filter_map(|m| self.keys.outbox_of_member(m)).collect();
                    ids.extend(listed.iter().cloned());
                    registry.1 = listed;
                }
                Err(e) => tracing::debug!(error = %e, "reading the registry of outboxes failed"),
            }
        }
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

pub fn parse_entry(entry: &StreamId, epoch: i64) -> Option<OrderMsg> {
    Some(OrderMsg {
        id: entry.get("o")?,
        user_id: entry.get("u")?,
        voucher_id: entry.get("v")?,
        created_ms: entry.get("t")?,
        epoch,
    })
}
