//! The recovery desk of one process: what it has closed, the points it saw,
//! the repairs it was asked for, and the task that refreshes the points and runs the repairs.
use super::closed::Closed;
use super::durability::Durability;
use super::history::Histories;
use crate::keys::Keys;
use crate::metrics::Metrics;
use crate::redis_conn::Redis;
use crate::sales::cache::VoucherCache;
use anyhow::{Context, Result};
use sqlx::PgPool;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::Notify;

/// How often the desk refreshes the points from Postgres and retries the repairs
/// it was asked for.
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);
/// How long a sale that ended stays in the refresh (and its gauge).
const ENDED_KEPT: chrono::Duration = chrono::Duration::minutes(5);

pub struct Recovery {
    pub redis: Redis,
    /// The background pool.
    pub pg: PgPool,
    pub keys: Keys,
    pub cache: Arc<VoucherCache>,
    pub metrics: Arc<Metrics>,
    /// The outbox formats this process reads and writes (the repair reads outboxes
    /// and puts orders back into them).
    pub formats: Arc<crate::ordering::outbox::format::Formats>,
    /// What this process saw of each shard's history.
    pub histories: Histories,
    pub closed: Closed,
    /// What Redis says of its persistence, read once.
    pub durability: RwLock<Option<Durability>>,
    /// Sales whose repair (or check) this process was asked for, and why.
    pub(super) requests: Mutex<HashMap<i64, String>>,
    /// Names this process as a repairer (`sale_states.repairer`).
    pub(super) me: String,
    /// The sales this process checks or repairs now (each at most once at a time;
    /// different sales at once).
    pub(super) repairing: Mutex<std::collections::HashSet<i64>>,
    /// How long a repair's lease lasts unless renewed (`SECKILL_REPAIR_LEASE_MS`).
    pub lease: Duration,
    /// What side writes wait for (None: no replica), see [`super::side`].
    pub(super) replicas: Option<SideReplicas>,
    /// This process's row of `shard_points` for its side writes.
    pub(super) side_writer: String,
    /// Whether the points were read from Postgres once: until then every sale is
    /// closed here (a process that starts while Redis has gone back in time must
    /// not sell from it knowing nothing of what the relays saw).
    ready: std::sync::atomic::AtomicBool,
    pub(super) wake: Notify,
    /// The sales whose `sale_states` row this process made sure of
    /// ([`Recovery::generations`]).
    pub(super) states_made: Mutex<std::collections::HashSet<i64>>,
    /// Acknowledged orders handed over by this process's gates, to be settled
    /// (see [`super::rescue`]), each with its shard's tag.
    pub(super) rescued: Mutex<Vec<(String, crate::ordering::OrderMsg)>>,
}

/// One sale's row of `sale_states`.
#[derive(Clone, Debug, Default, sqlx::FromRow)]
pub struct SaleState {
    pub voucher_id: i64,
    pub gen: i64,
    pub repairs: i32,
    pub closed_since: Option<chrono::DateTime<chrono::Utc>>,
    /// Closed time of the repairs finished, in ms.
    pub closed_ms: i64,
    /// The closure under way, in ms (0 if open).
    pub closed_now_ms: i64,
    pub last_reason: Option<String>,
}

impl Recovery {
    pub fn new(
        redis: Redis,
        pg: PgPool,
        keys: Keys,
        cache: Arc<VoucherCache>,
        metrics: Arc<Metrics>,
        formats: Arc<crate::ordering::outbox::format::Formats>,
    ) -> Self {
        let me = uuid::Uuid::new_v4().simple().to_string();
        Self {
            redis,
            pg,
            keys,
            cache,
            metrics,
            formats,
            histories: Histories::default(),
            closed: Closed::default(),
            durability: RwLock::new(None),
            requests: Mutex::new(HashMap::new()),
            side_writer: format!("side-{me}"),
            me,
            repairing: Mutex::default(),
            lease: Duration::from_secs(5),
            replicas: None,
            ready: std::sync::atomic::AtomicBool::new(false),
            wake: Notify::new(),
            states_made: Mutex::default(),
            rescued: Mutex::default(),
        }
    }

    /// The same desk with repair leases of `lease`.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The same desk whose side writes wait for `replicas` replicas for at most
    /// `deadline` (none if 0), over a link of their own (commands of `timeout`).
    pub fn with_replicas(mut self, replicas: u32, deadline: Duration, timeout: Duration) -> Self {
        self.replicas = (replicas > 0).then(|| SideReplicas {
            replicas,
            deadline,
            link: self.redis.dedicated(timeout + deadline),
        });
        self
    }

    /// Whether side writes wait for replicas (`SECKILL_REDIS_WAIT_REPLICAS` > 0).
    pub fn waits_for_replicas(&self) -> bool {
        self.replicas.is_some()
    }

    pub(super) fn namespace(&self) -> &str {
        self.keys.namespace()
    }

    /// A script found a shard of `voucher`'s sale lost (its stock key missing) or
    /// behind this process's floor (it went back in time): the sale is closed here
    /// at once (orders answer 503 without Redis), and its repair asked for.
    pub fn lost(&self, voucher: i64, reason: &str) {
        // Closed first, then the logs taken: a call in flight now whose orders reach
        // a log after this takes it finds the sale closed and hands them over
        // itself (`crate::ordering::gates`).
        if self.closed.close(voucher) {
            self.metrics.redis_repairing.set(self.closed.list().len() as i64);
            tracing::warn!(
                voucher,
                reason,
                "a shard of this sale lost state or went back in time: its orders get 503 until it is repaired"
            );
        }
        // The orders this process acknowledged on the sale's shards and perhaps no
        // relay read: to the desk, recorded before the repair reads the intents.
        for (tag, shard) in self.histories.of_sale(voucher) {
            self.rescue(&tag, shard.take_log());
        }
        self.requests
            .lock()
            .expect("requests poisoned")
            .entry(voucher)
            .or_insert_with(|| reason.to_owned());
        self.wake.notify_one();
    }

    /// Whether `voucher`'s sale is closed in this process (every sale is until the
    /// points were read once).
    pub fn is_closed(&self, voucher: i64) -> bool {
        !self.ready.load(std::sync::atomic::Ordering::Acquire) || self.closed.is_closed(voucher)
    }

    /// The running sales (and those ended lately): id and shards.
    fn running(&self) -> Vec<(i64, u32)> {
        let since = chrono::Utc::now() - ENDED_KEPT;
        self.cache
            .flash_sales()
            .iter()
            .filter_map(|e| {
                let f = e.voucher.flash.as_ref()?;
                (f.end_at > since).then_some((e.voucher.id, f.shards()))
            })
            .collect()
    }

    /// Adds to the running sales' shards the points Postgres recorded (the
    /// relays' and side writes', each sale's generation); asks for a check of the sales another
    /// process closed; keeps the closed-time gauge of the running sales.
    pub async fn refresh(&self) -> Result<()> {
        let running = self.running();
        if running.is_empty() {
            self.ready.store(true, std::sync::atomic::Ordering::Release);
            return Ok(());
        }
        let tags: Vec<String> = running
            .iter()
            .flat_map(|(v, n)| (0..*n).map(move |k| crate::keys::shard_tag(*v, k, *n).to_string()))
            .collect();
        self.histories.refresh(&self.pg, self.namespace(), &tags).await?;
        let ids: Vec<i64> = running.iter().map(|(v, _)| *v).collect();
        let states = self.states(&ids).await?;
        self.metrics.sale_closed_seconds.reset();
        for (v, n) in &running {
            let s = states.get(v).cloned().unwrap_or_default();
            for k in 0..*n {
                let tag = crate::keys::shard_tag(*v, k, *n).to_string();
                let older = self.histories.shard(&tag).raise_gen(s.gen);
                self.rescue(&tag, older);
            }
            let asked = self.requests.lock().expect("requests poisoned").contains_key(v);
            if (s.closed_since.is_some() || self.closed.is_closed(*v)) && !asked {
                // Another process found it lost (closed here too until this one has
                // checked it: its stock keys are gone, orders would fail anyway), or
                // it is closed here with no check pending: ask for one.
                self.lost(*v, s.last_reason.as_deref().unwrap_or("closed by another process"));
            }
            self.metrics
                .sale_closed_seconds
                .with_label_values(&[&v.to_string()])
                .set((s.closed_ms + s.closed_now_ms) as f64 / 1000.0);
        }
        self.ready.store(true, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// The `sale_states` rows of `vouchers`.
    pub async fn states(&self, vouchers: &[i64]) -> Result<HashMap<i64, SaleState>> {
        let rows: Vec<SaleState> = sqlx::query_as(
            "SELECT voucher_id, gen, repairs, closed_since, closed_ms,
                    COALESCE((extract(epoch FROM now() - closed_since) * 1000)::bigint, 0) AS closed_now_ms,
                    last_reason
               FROM sale_states WHERE namespace = $1 AND voucher_id = ANY($2)",
        )
        .bind(self.namespace())
        .bind(vouchers)
        .fetch_all(&self.pg)
        .await
        .context("reading the sales' states")?;
        Ok(rows.into_iter().map(|s| (s.voucher_id, s)).collect())
    }
}

/// Replicas a side write waits for, over a link of its own (`WAIT` holds its
/// connection until the replicas answer).
pub struct SideReplicas {
    pub replicas: u32,
    pub deadline: Duration,
    pub link: Redis,
}
