//! One relay: [`Relay::step`] does one read-publish-acknowledge round; [`Relay::run`]
//! loops it and reconnects to RabbitMQ after failures.
mod claim;
pub mod intent;
mod outboxes;
mod points;
mod publish;
pub mod read_before_repair;
mod round;
mod slots;
mod unreadable;

use crate::broker::Broker;
use crate::config::Settings;
use crate::keys::Keys;
use crate::ordering::model::OrderMsg;
use crate::redis_conn::Redis;
use crate::sales::cache::VoucherCache;
use anyhow::{Context, Result};
use lapin::options::ConfirmSelectOptions;

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
    /// This process's points of each shard, to which the relay adds those it reads.
    recovery: Arc<crate::recovery::Recovery>,
    consumer: String,
    metrics: Arc<crate::metrics::Metrics>,
    /// How much a round reads and how long it waits.
    tuning: Tuning,
    /// Orders read before a repair of their sale whose entry is gone and whose sale
    /// is closed: settled again a second later (see `read_before_repair`).
    held: Held,
    /// What the relay remembers from one round to the next.
    memory: Memory,
}

/// How much a round reads and how long it waits.
struct Tuning {
    /// Orders per message, and about as many per outbox read.
    batch: usize,
    /// How long a round that read less than a batch lets orders gather.
    linger: Duration,
    /// How long an entry stays pending before another relay claims it.
    claim_idle: Duration,
    /// How long a publish waits for its confirm.
    confirm_timeout: Duration,
}

/// Orders held from one round to a later one (see `read_before_repair`).
#[derive(Default)]
struct Held {
    orders: std::sync::Mutex<Vec<(OrderMsg, Origin)>>,
    /// When the held orders were last settled.
    tried: std::sync::Mutex<Option<Instant>>,
}

/// What a relay remembers from one round to the next.
struct Memory {
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
    /// The latest point of each shard this relay recorded (see `points`).
    recorded: std::sync::Mutex<HashMap<String, crate::recovery::Point>>,
}

/// One outbox stream's key (a voucher's, or one of its shards').
type Outbox = String;

/// One order read in a round, with where it came from (see `read_before_repair`).
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
        let timeout = settings.services.dependency_timeout;
        Self {
            // Its own connection: XREADGROUP BLOCK must not hold up the order path.
            redis: redis.dedicated(timeout + Duration::from_millis(BLOCK_MS)),
            keys,
            cache,
            broker,
            pg,
            recovery,
            consumer,
            metrics,
            tuning: Tuning {
                batch: settings.pipeline.relay_batch,
                linger: settings.pipeline.relay_linger,
                claim_idle: settings.pipeline.relay_claim_idle,
                confirm_timeout: timeout.max(Duration::from_secs(5)),
            },
            held: Held::default(),
            memory: Memory {
                registry: Default::default(),
                left_pending: Default::default(),
                slot_warned: Default::default(),
                reread: Default::default(),
                per_entry: std::sync::atomic::AtomicUsize::new(1),
                unreadable: Default::default(),
                recorded: Default::default(),
            },
        }
    }

    /// How many entries one read of an outbox asks for: about `batch` orders, as
    /// many orders per entry as the last round saw. A message then carries about
    /// `batch` orders per outbox read (one entry at least), whether the calls that
    /// wrote the entries carried one order each or a crowd's worth.
    fn entries_per_read(&self) -> usize {
        (self.tuning.batch / self.memory.per_entry.load(std::sync::atomic::Ordering::Relaxed).max(1)).max(1)
    }

    /// Runs until `stop`. The round in progress finishes before it returns.
    pub async fn run(&self, stop: CancellationToken) {
        // No entry is read before this process announced the formats it reads
        // (see `crate::ordering::outbox::format`).
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
            if last_claim.elapsed() >= self.tuning.claim_idle / 2 {
                last_claim = Instant::now();
                if self.claim().await? > 0 {
                    read = Read::OwnPending;
                }
            }
            if self
                .memory
                .left_pending
                .swap(false, std::sync::atomic::Ordering::Relaxed)
            {
                read = Read::OwnPending;
            }
            let round = Instant::now();
            let n = self.step(&channel, read).await?;
            if read == Read::OwnPending && n == 0 {
                read = Read::New;
            }
            if read == Read::New && n > 0 && n < self.tuning.batch {
                // Less than a full batch: let orders gather before the next read, so
                // that under a crowd one message (one confirm, one worker
                // transaction) carries many orders. Orders are acknowledged to
                // shoppers before they reach the outbox, so this delays only their
                // persistence, by at most the linger.
                if let Some(rest) = self.tuning.linger.checked_sub(round.elapsed()) {
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
}
