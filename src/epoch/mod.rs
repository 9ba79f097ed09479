//! Redis epochs: noticing that Redis may have gone back in time, and repairing
//! every flash sale before selling again.
//!
//! Redis can lose or roll back what it acknowledged: a restart without persistence
//! or from an older snapshot, an AOF written with `appendfsync everysec`, a failover
//! to a replica that missed the last writes, a flush. Every such server is a new
//! process (a new `run_id`) or lacks the epoch marker, so the guard of every process
//! checks, once a second and whenever a connection meets a new server
//! ([`crate::redis_conn`]):
//!
//! - Postgres (`redis_epochs`) records the server `run_id` and epoch it vouches for;
//! - Redis holds the epoch in `<ns>:epoch`, and every flash sale still on holds
//!   its stock key.
//!
//! All agree: the process trusts the server at that epoch (sales open). Anything
//! else: it stops selling (503), and one process at a time (a Postgres advisory
//! lock, which does not live in the Redis being repaired) repairs:
//!
//! 1. takes a new epoch in Postgres for this server, marked `repairing` (counters,
//!    whose keys carry the epoch, restart from their durable marks at once);
//! 2. waits until the orders in flight have reached Postgres: the relays do not read
//!    while the server is unverified, the orders queue is empty and Postgres's
//!    order count stays still;
//! 3. in one transaction that holds the epoch row (the worker's transactions take
//!    it shared, so none commits in between): reads each sale's orders from
//!    Postgres and the orders still in its outbox stream, and rewrites the sale in
//!    Redis (stock = Postgres stock − orders in the outbox, shoppers' marks, the
//!    order index, returned units), each write fenced by the epoch; writes the
//!    epoch marker; clears `repairing`.
//!
//! An order that was in a relay's or worker's hands across the repair carries the
//! old epoch; the worker accounts for it in Redis before storing it (see
//! [`crate::worker::persist`]).
mod durability;
mod repair;
mod restore;

pub use durability::{durability, Durability};
pub use restore::read_outbox;

use crate::broker::Broker;
use crate::keys::Keys;
use crate::redis_conn::{Redis, Verified};
use crate::voucher::cache::VoucherCache;
use anyhow::{Context, Result};
use sqlx::PgPool;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often every process checks the server it talks to.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The epoch row of a namespace.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct EpochRow {
    pub epoch: i64,
    pub server: String,
    pub repairing: bool,
}

pub async fn read_row(pg: &PgPool, namespace: &str) -> Result<Option<EpochRow>> {
    sqlx::query_as("SELECT epoch, server, repairing FROM redis_epochs WHERE namespace = $1")
        .bind(namespace)
        .fetch_optional(pg)
        .await
        .context("reading the Redis epoch")
}

pub struct EpochGuard {
    pub redis: Redis,
    pub pg: PgPool,
    pub keys: Keys,
    pub cache: Arc<VoucherCache>,
    pub broker: Arc<Broker>,
    /// How long the persisted count must stay still to call the pipeline drained.
    pub quiet: Duration,
    pub metrics: Arc<crate::metrics::Metrics>,
    pub durability: std::sync::RwLock<Option<Durability>>,
}

impl EpochGuard {
    /// Checks at once, then every [`CHECK_EVERY`] and whenever a connection meets
    /// another server, until `stop`.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let identity = self.redis.identity().clone();
        let mut failures = 0u32;
        loop {
            match self.check_and_repair().await {
                Ok(()) => failures = 0,
                Err(e) => {
                    failures += 1;
                    if failures <= 3 || failures.is_multiple_of(30) {
                        tracing::warn!(error = %format!("{e:#}"), "checking the Redis epoch failed");
                    }
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = identity.suspect.notified() => {}
                _ = tokio::time::sleep(CHECK_EVERY) => {}
            }
        }
    }

    fn namespace(&self) -> &str {
        self.keys.namespace()
    }

    /// One check; repairs if needed (or waits for the process that repairs).
    pub async fn check_and_repair(&self) -> Result<()> {
        let identity = self.redis.identity().clone();
        let (healthy, run_id, row) = match self.check().await {
            Ok(x) => x,
            Err(e) => {
                // Cannot tell (Postgres or Redis unreachable). A verification stands
                // while the connection it was made for does: a server that went back
                // in time is a new process, met only over a new connection, which
                // clears it (see redis_conn). So a Postgres outage does not stop
                // sales; a new Redis server during one does, until it is checked.
                return Err(e);
            }
        };
        if healthy {
            let row = row.expect("healthy implies a row");
            let v = Verified {
                run_id,
                epoch: row.epoch,
                repairing: false,
            };
            if identity.get().as_ref() != Some(&v) {
                tracing::info!(epoch = v.epoch, run_id = %v.run_id, "Redis verified");
                identity.set(Some(v));
            }
            self.metrics.redis_repairing.set(0);
            return Ok(());
        }
        // Not healthy: no sales from this server until it is repaired. Counters may
        // go on where Postgres already gave this server an epoch.
        identity.set(row.filter(|r| *r.server == *run_id).map(|r| Verified {
            run_id: run_id.clone(),
            epoch: r.epoch,
            repairing: true,
        }));
        self.metrics.redis_repairing.set(1);
        self.repair().await
    }

    /// Whether Postgres and Redis agree; the server's run id; the epoch row.
    async fn check(&self) -> Result<(bool, Arc<str>, Option<EpochRow>)> {
        // The node's run_id, or every master's of a cluster, as they are now.
        let run_id = self.redis.current_identity().await?;
        let mut conn = self.redis.conn().await?;
        let row = read_row(&self.pg, self.namespace()).await?;
        let now = chrono::Utc::now();
        // Every shard's stock key of every live sale.
        let live: Vec<(i64, u32, u32)> = self
            .cache
            .flash_sales()
            .iter()
            .filter_map(|e| {
                e.voucher
                    .flash
                    .as_ref()
                    .filter(|f| f.end_at > now)
                    .map(|f| (e.voucher.id, f.shards()))
            })
            .flat_map(|(v, shards)| (0..shards).map(move |k| (v, k, shards)))
            .collect();
        let mut pipe = redis::pipe();
        pipe.get(self.keys.epoch());
        for (v, k, shards) in &live {
            pipe.exists(self.keys.stock_at(*v, *k, *shards));
        }
        let reply: Vec<redis::Value> = pipe.query_async(&mut conn).await.context("reading the epoch marker")?;
        let marker: Option<i64> = redis::from_redis_value_ref(&reply[0]).ok().flatten();
        let stocks_present = reply[1..]
            .iter()
            .all(|v| redis::from_redis_value_ref::<bool>(v).unwrap_or(false));
        let healthy = row
            .as_ref()
            .is_some_and(|r| !r.repairing && *r.server == *run_id && marker == Some(r.epoch))
            && stocks_present;
        if self.durability.read().expect("durability poisoned").is_none() {
            let d = durability(&mut conn).await;
            if !d.safe {
                tracing::warn!(aof = %d.aof, replicas = d.replicas, at_risk = %d.at_risk, "Redis durability");
            } else {
                tracing::info!(aof = %d.aof, "Redis durability: acknowledged orders survive a Redis crash");
            }
            *self.durability.write().expect("durability poisoned") = Some(d);
        }
        Ok((healthy, run_id, row))
    }
}
