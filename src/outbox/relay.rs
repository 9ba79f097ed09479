//! One relay: [`Relay::step`] does one read-publish-acknowledge round; [`Relay::run`]
//! loops it and reconnects to RabbitMQ after failures.
mod claim;
pub mod intent;
pub mod late;
mod outboxes;
mod slots;

use crate::broker::{publish_confirmed, Broker, ORDERS_ROUTING_KEY};
use crate::config::Settings;
use crate::keys::Keys;
use crate::order::model::{OrderBatch, OrderMsg};
use crate::redis_conn::Redis;
use crate::voucher::cache::VoucherCache;
use anyhow::{Context, Result};
use lapin::options::ConfirmSelectOptions;
use lapin::{BasicProperties, Channel};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How long one XREADGROUP waits for new entries.
pub(super) const BLOCK_MS: u64 = 200;

pub struct Relay {
    redis: Redis,
    keys: Keys,
    cache: Arc<VoucherCache>,
    broker: Arc<Broker>,
    /// Where intents are recorded before each publish ([`intent`]).
    pg: sqlx::PgPool,
    /// This process's floors, raised to the sequences the relay reads.
    recovery: Arc<crate::recovery::Recovery>,
    /// Orders read before a repair of their sale whose entry is gone and whose sale
    /// is closed: settled again a second later (see `late`).
    held: std::sync::Mutex<Vec<(OrderMsg, Origin)>>,
    /// When the held orders were last settled.
    held_tried: std::sync::Mutex<Option<Instant>>,
    /// The sales whose `sale_states` row this relay made sure of.
    states_made: std::sync::Mutex<std::collections::HashSet<i64>>,
    consumer: String,
    batch: usize,
    linger: Duration,
    claim_idle: Duration,
    confirm_timeout: Duration,
    metrics: Arc<crate::metrics::Metrics>,
    /// The registry of outboxes in Redis (`<ns>:outboxes`) as last read, and when.
    registry: std::sync::Mutex<(Option<Instant>, Vec<Outbox>)>,
    /// Set when a round read nothing of this consumer's pending entries on purpose:
    /// the next round reads them again.
    left_pending: std::sync::atomic::AtomicBool,
    /// When each failing slot was last logged as a warning.
    slot_warned: std::sync::Mutex<HashMap<u16, Instant>>,
    /// Slots whose last read failed: their next read takes this consumer's
    /// pending entries (a read that timed out may have been carried out).
    reread: std::sync::Mutex<std::collections::HashSet<u16>>,
    /// Orders per outbox entry in the last round that read any (at least 1): an
    /// entry carries the orders of one `reserve.lua` call, so a read asks for
    /// about `batch` orders' worth of entries ([`Relay::entries_per_read`]).
    per_entry: std::sync::atomic::AtomicUsize,
    /// Outbox entries (stream, id) this relay could not read and left pending:
    /// each counted and logged once.
    unreadable: std::sync::Mutex<std::collections::HashSet<(String, String)>>,
}

/// One outbox stream's key (a voucher's, or one of its shards').
type Outbox = String;

/// One order read in a round, with where it came from (see `late`).
#[derive(Clone, Debug)]
pub struct Origin {
    /// The shard's hash tag.
    pub tag: String,
    /// Its outbox entry (stream key, entry id); `None` for an order held from an
    /// earlier round (its entry is gone).
    pub entry: Option<(String, String)>,
}

/// The consumer that holds the outbox entries a relay could not read (see
/// [`Relay::park_unreadable`]): no relay reads as it.
pub const PARKED: &str = "unreadable";

/// How often the relay re-reads the registry of outboxes.
const REGISTRY_EVERY: Duration = Duration::from_secs(2);

/// How long a relay on a Redis Cluster waits between reads that found nothing.
pub(super) const CLUSTER_POLL_MS: u64 = 20;

/// Which entries a step reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// Entries no relay has read yet (`>`).
    New,
    /// Entries this consumer read but has not acknowledged (`0`).
    OwnPending,
}

/// What a relay moves orders between: the Redis its outboxes are in, RabbitMQ, and
/// the Postgres where it records each batch before publishing it ([`intent`]).
pub struct Ends {
    pub redis: Redis,
    pub broker: Arc<Broker>,
    pub pg: sqlx::PgPool,
    pub recovery: Arc<crate::recovery::Recovery>,
}

impl Relay {
    pub fn new(
        ends: Ends,
        keys: Keys,
        cache: Arc<VoucherCache>,
        consumer: String,
        settings: &Settings,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        let Ends {
            redis,
            broker,
            pg,
            recovery,
        } = ends;
        let timeout = settings.dependency_timeout;
        Self {
            // Its own connection: XREADGROUP BLOCK must not hold up the order path.
            redis: redis.dedicated(timeout + Duration::from_millis(BLOCK_MS)),
            keys,
            cache,
            broker,
            pg,
            recovery,
            held: Default::default(),
            held_tried: Default::default(),
            states_made: Default::default(),
            consumer,
            batch: settings.relay_batch,
            linger: settings.relay_linger,
            claim_idle: settings.relay_claim_idle,
            confirm_timeout: timeout.max(Duration::from_secs(5)),
            metrics,
            registry: Default::default(),
            left_pending: Default::default(),
            slot_warned: Default::default(),
            reread: Default::default(),
            per_entry: std::sync::atomic::AtomicUsize::new(1),
            unreadable: Default::default(),
        }
    }

    /// How many entries one read of an outbox asks for: about `batch` orders, as
    /// many orders per entry as the last round saw. A message then carries about
    /// `batch` orders per outbox read (one entry at least), whether the calls that
    /// wrote the entries carried one order each or a crowd's worth.
    fn entries_per_read(&self) -> usize {
        (self.batch / self.per_entry.load(std::sync::atomic::Ordering::Relaxed).max(1)).max(1)
    }

    /// An outbox entry this relay cannot read, left pending: the first time this
    /// process meets it, counted (`worker_incidents_total{kind="unreadable_outbox_entry"}`)
    /// and logged as an incident.
    fn unreadable_met(&self, stream: &str, id: &str) {
        let first = self
            .unreadable
            .lock()
            .expect("unreadable poisoned")
            .insert((stream.to_owned(), id.to_owned()));
        if first {
            self.metrics
                .worker_incidents
                .with_label_values(&["unreadable_outbox_entry"])
                .inc();
            tracing::error!(
                stream = %stream,
                id = %id,
                "INCIDENT: an outbox entry this relay cannot read (a newer format, or not written by \
                 reserve.lua) is left pending, parked, never acknowledged: a relay that reads it claims it \
                 after the claim timeout"
            );
        }
    }

    /// Hands entries this relay cannot read to the consumer [`PARKED`] (their
    /// idle time starts again), out of this consumer's pending list: its re-reads of
    /// its own pending entries (which start at the lowest id) would otherwise meet
    /// them first every time, and never reach the readable entries behind them.
    /// Any relay's claim takes them after the claim timeout: one that reads them
    /// publishes them, one that does not parks them again. Should the hand-over
    /// fail, they stay this consumer's, pending, and are parked at the next read.
    async fn park_unreadable(&self, conn: &mut crate::redis_conn::Conn, entries: &HashMap<String, Vec<String>>) {
        for (stream, ids) in entries {
            let r: redis::RedisResult<redis::Value> = redis::cmd("XCLAIM")
                .arg(stream)
                .arg(crate::keys::RELAY_GROUP)
                .arg(PARKED)
                .arg(0)
                .arg(ids)
                .arg("JUSTID")
                .query_async(conn)
                .await;
            if let Err(e) = r {
                tracing::warn!(outbox = %stream, error = %e, "parking unreadable outbox entries failed; they stay pending here");
            }
        }
    }

    /// Runs until `stop`. The round in progress finishes before it returns.
    pub async fn run(&self, stop: CancellationToken) {
        // No entry is read before this process announced the formats it reads
        // (see `crate::outbox::format`).
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = self.recovery.formats.registered() => {}
        }
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
            // A round can end without awaiting anything pending (nothing to read,
            // the registry and the connection cached): once the task's budget is
            // spent this yields, so that no such path holds the runtime's thread
            // (on a single-thread runtime: every task of the process) again.
            tokio::task::consume_budget().await;
            if last_claim.elapsed() >= self.claim_idle / 2 {
                last_claim = Instant::now();
                if self.claim().await? > 0 {
                    read = Read::OwnPending;
                }
            }
            if self.left_pending.swap(false, std::sync::atomic::Ordering::Relaxed) {
                read = Read::OwnPending;
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
        self.broker.close_conn(&conn, "relay stopping").await;
        Ok(())
    }

    /// One round: read about `batch` orders' worth of entries per outbox
    /// ([`Relay::entries_per_read`]), record them as about to be published
    /// ([`intent`]), publish them in messages of `batch` to `2 × batch − 1` orders
    /// ([`messages`]; one message if the round read fewer), wait for
    /// the broker's confirms, then acknowledge the entries and drop them from the
    /// outbox (`lua/outbox_ack.lua`). Returns how many orders were published.
    pub async fn step(&self, channel: &Channel, read: Read) -> Result<usize> {
        // A round that reads nothing leaves a pending re-read for the next one.
        let keep_pending = || {
            if read == Read::OwnPending {
                self.left_pending.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        };
        // Orders held from an earlier round (see `late`), settled again once a
        // second: until then they take no part (and hold no round up).
        let held: Vec<(OrderMsg, Origin)> = {
            let mut last = self.held_tried.lock().expect("held poisoned");
            let due = last.is_none_or(|t| t.elapsed() >= crate::recovery::desk::REFRESH_EVERY);
            let held = self.held.lock().expect("held poisoned").clone();
            if due && !held.is_empty() {
                *last = Some(Instant::now());
                held
            } else {
                Vec::new()
            }
        };
        let streams: Vec<String> = self.outboxes().await;
        if streams.is_empty() && held.is_empty() {
            keep_pending();
            return Ok(0);
        }
        // Any server, whatever it went through: an outbox entry is an order Redis
        // admitted, to be published; a shard that went back in time is the repair's
        // business, which counts what this relay records an intent for.
        let mut conn = self.redis.conn().await?;
        let reply = match streams.is_empty() {
            true => None,
            false => self.read(&mut conn, &streams, read).await?,
        };
        let mut orders: Vec<(OrderMsg, Origin)> = Vec::new();
        let mut entries = 0;
        let mut done: HashMap<String, Vec<String>> = HashMap::new();
        // The highest sequence read per shard: recorded with the intents, and this
        // process's floors raised to it once they are.
        let mut seen: HashMap<String, i64> = HashMap::new();
        let mut unreadable: HashMap<String, Vec<String>> = HashMap::new();
        for stream in reply.map(|r| r.keys).unwrap_or_default() {
            let tag = self.keys.tag_of(&stream.key).unwrap_or_default().to_owned();
            for entry in stream.ids {
                match crate::outbox::entry::parse(&entry, self.recovery.formats.reads()) {
                    Some(e) => {
                        entries += 1;
                        if let Some(seq) = e.seq {
                            let top = seen.entry(tag.clone()).or_default();
                            *top = (*top).max(seq);
                        }
                        let origin = Origin {
                            tag: tag.clone(),
                            entry: Some((stream.key.clone(), entry.id.clone())),
                        };
                        orders.extend(e.orders.into_iter().map(|o| (o, origin.clone())));
                    }
                    // An entry this binary cannot read (a newer format during a
                    // rolling upgrade, or one reserve.lua did not write) may hold
                    // acknowledged orders: it is never acknowledged unread. It stays
                    // pending, parked (see `park_unreadable`), so that a relay that
                    // reads it claims it after the claim timeout; the other entries
                    // go on. Counted and logged once per entry by this process.
                    None => {
                        self.unreadable_met(&stream.key, &entry.id);
                        unreadable.entry(stream.key.clone()).or_default().push(entry.id);
                        continue;
                    }
                }
                done.entry(stream.key.clone()).or_default().push(entry.id);
            }
        }
        if !unreadable.is_empty() {
            self.park_unreadable(&mut conn, &unreadable).await;
        }
        if entries > 0 {
            self.per_entry
                .store(orders.len().div_ceil(entries), std::sync::atomic::Ordering::Relaxed);
        }
        orders.extend(held);
        if orders.is_empty() {
            if !done.is_empty() {
                self.acknowledge(&conn, &done).await?;
            }
            return Ok(0);
        }
        // Orders not of their sale's generation (read before a repair of it): see
        // `late`. A round may read more than `batch` orders (a read asks each
        // outbox for about `batch` orders' worth of entries, by the last round's
        // orders per entry, and entries differ in size). If a later message cannot
        // be published, the round's entries stay pending and are published again,
        // the earlier messages' orders too (the worker stores each order once).
        let floors: Vec<(String, i64)> = seen.into_iter().collect();
        let Some(published) = self.publish_read(&mut conn, channel, orders, &floors).await? else {
            self.left_pending.store(true, std::sync::atomic::Ordering::Relaxed);
            return Ok(0);
        };
        for (tag, seq) in &floors {
            self.recovery.floors.raise(tag, *seq);
        }
        if !done.is_empty() {
            self.acknowledge(&conn, &done).await?;
        }
        Ok(published)
    }

    /// Publishes orders this relay read (`floors`: the highest sequence read of each
    /// shard), each recorded first in an intent (see `intent`); orders not of
    /// their sale's generation are settled first (see `late`). Returns how many it
    /// published, or `None` when a repair kept refusing the intent: what is left
    /// stays pending in the outbox (orders without an entry are held).
    pub async fn publish_read(
        &self,
        conn: &mut crate::redis_conn::Conn,
        channel: &Channel,
        orders: Vec<(OrderMsg, Origin)>,
        floors: &[(String, i64)],
    ) -> Result<Option<usize>> {
        let mut published = 0;
        let mut todo = orders;
        for attempt in 0..3 {
            let vouchers: Vec<i64> = todo.iter().map(|(o, _)| o.voucher_id).collect();
            let gens = self.generations(&vouchers).await?;
            let (stale, mut fresh): (Vec<_>, Vec<_>) = std::mem::take(&mut todo)
                .into_iter()
                .partition(|(o, _)| o.epoch != gens.get(&o.voucher_id).copied().unwrap_or(0));
            if !stale.is_empty() {
                fresh.extend(self.settle_stale(conn, stale, &gens).await?);
            }
            let chunks: Vec<std::ops::Range<usize>> = messages(fresh.len(), self.batch).collect();
            let mut refused = None;
            for (k, range) in chunks.iter().enumerate() {
                let chunk: Vec<OrderMsg> = fresh[range.clone()].iter().map(|(o, _)| *o).collect();
                // Recorded before the publish (see `intent`), with the shards' floors,
                // while every sale is still at the generation its orders are of.
                let Some(intent) = intent::record(&self.pg, self.keys.namespace(), &chunk, floors).await? else {
                    refused = Some(k);
                    break;
                };
                if let Err(e) = self.publish(channel, &chunk, intent).await {
                    self.metrics.relay_confirms.with_label_values(&["error"]).inc();
                    return Err(e);
                }
                self.metrics.relay_confirms.with_label_values(&["ack"]).inc();
                self.metrics.relay_published.inc_by(chunk.len() as u64);
                published += chunk.len();
                let now_ms = chrono::Utc::now().timestamp_millis();
                for o in &chunk {
                    self.metrics
                        .relay_lag_seconds
                        .observe((now_ms - o.created_ms).max(0) as f64 / 1000.0);
                }
            }
            let Some(k) = refused else {
                return Ok(Some(published));
            };
            // A repair took a sale's next generation meanwhile: the rest is settled
            // again against it (an entry may have gone with what it repaired).
            todo = chunks[k..]
                .iter()
                .flat_map(|r| fresh[r.clone()].iter().cloned())
                .collect();
            tracing::info!(
                attempt,
                orders = todo.len(),
                "a repair began: settling the rest of the round again"
            );
        }
        // Still refused: entries stay pending (read again), orders without one held.
        let entryless: Vec<(OrderMsg, Origin)> = todo.into_iter().filter(|(_, o)| o.entry.is_none()).collect();
        self.hold(&entryless);
        Ok(None)
    }

    async fn publish(&self, channel: &Channel, orders: &[OrderMsg], intent: i64) -> Result<()> {
        let body = serde_json::to_vec(&OrderBatch {
            orders: orders.to_vec(),
            intent: Some(intent),
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
}

/// The messages of a round of `total` orders, as ranges of its orders: `total`
/// split into `max(1, total / batch)` messages whose sizes differ by one at most,
/// each of `batch` to `2 × batch − 1` orders (one message of `total` if fewer than
/// `batch`, none if `total` is 0). A round split into messages of exactly `batch`
/// left a small message for its remainder (1,027 orders went as 1,000 and 27): in
/// a cost run, 147
/// messages of 680 orders on average where 104 of 962 carry the same rounds
/// (docs/PERFORMANCE.md). Each message costs a relay intent, a publish and its
/// confirm, and a worker transaction.
fn messages(total: usize, batch: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    // No message for a round without orders (its entries were all malformed).
    let n = if total == 0 { 0 } else { (total / batch.max(1)).max(1) };
    let (size, longer) = (total / n.max(1), total % n.max(1));
    // The first `longer` messages carry one order more.
    (0..n).map(move |k| {
        let start = k * size + k.min(longer);
        start..start + size + usize::from(k < longer)
    })
}

#[cfg(test)]
mod message_tests {
    use crate::outbox::relay::messages;

    #[test]
    fn a_round_is_split_into_messages_of_batch_to_twice_batch() {
        for batch in [1usize, 4, 1000] {
            for total in 1..(5 * batch + 3) {
                let ranges: Vec<_> = messages(total, batch).collect();
                assert_eq!(ranges.first().map(|r| r.start), Some(0));
                assert!(ranges.windows(2).all(|w| w[0].end == w[1].start), "{ranges:?}");
                assert_eq!(ranges.last().map(|r| r.end), Some(total));
                let sizes: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
                assert_eq!(sizes.len(), (total / batch).max(1), "{total} orders, batch {batch}");
                if total >= batch {
                    assert!(
                        sizes.iter().all(|s| (batch..2 * batch).contains(s)),
                        "{total}/{batch}: {sizes:?}"
                    );
                } else {
                    assert_eq!(sizes, vec![total]);
                }
            }
        }
        assert_eq!(messages(0, 1000).count(), 0, "no message without orders");
        let sizes = |t, b| messages(t, b).map(|r| r.len()).collect::<Vec<_>>();
        assert_eq!(sizes(1027, 1000), vec![1027]);
        assert_eq!(sizes(3602, 1000), vec![1201, 1201, 1200]);
    }
}
