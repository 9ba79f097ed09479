//! Redis epochs: noticing that Redis may have gone back in time, and repairing
//! every flash sale before selling again.
//!
//! Redis can lose or roll back what it acknowledged: a restart without persistence
//! or from an older snapshot, an AOF written with `appendfsync everysec`, a failover
//! to a replica that missed the last writes, a flush, a master that resyncs from a
//! replica that fell behind and is promoted again (the same process). The guard of
//! every process checks, once a second and whenever a connection meets a new server
//! ([`crate::redis_conn`]):
//!
//! - Postgres (`redis_epochs`) records the server `run_id` and epoch it vouches for;
//! - Redis holds the epoch in `<ns>:epoch`, and every flash sale still on holds
//!   its stock key;
//! - the Redis clock (`<ns>:{<ns>:epoch}:clock`) is at or above the highest value
//!   Postgres recorded (`redis_clocks`). Each healthy check advances it and records
//!   the new value: a server that went back to a state from before the last
//!   recorded value is caught, whatever its `run_id` and marker say. Postgres is
//!   read before Redis, and a value is recorded only after Redis returned it, so a
//!   check racing another never sees a healthy server behind (see `clock`). Cost:
//!   one script in the check's existing Redis pipeline and one small Postgres
//!   UPDATE per check, i.e. per process and second.
//!
//! A new process or a missing marker is caught whatever the clock says; the clock
//! catches what keeps both, as a fail-back in the same process does. It does not
//! catch a rollback to a state after the last recorded value (writes of the last
//! check interval at most), nor sales in the moment between such a server coming
//! back and the next check.
//!
//! On one node the server is its `run_id` alone. Not its `role`: a connection is
//! made only to a master, and the check's tick is a write, which a replica refuses
//! (the connection breaks and is not made again until it is a master). Not its
//! `master_replid` either: it changes with a promotion, but also with no change of
//! data at all (a master without replicas for `repl-backlog-ttl` takes a new one),
//! and every such change would repair every sale for nothing; a promotion that
//! brought older data is caught by the clock. On a cluster the identity is every
//! master's `run_id/master_replid` ([`crate::redis_conn`]) and the clock lives on
//! the master of the marker's slot: a rollback of another master shows as a change
//! of its identity (a clock per master would have to follow slots as they move).
//!
//! All agree: the process trusts the server at that epoch (sales open). Anything
//! else: it stops selling (503), and one process at a time (a Postgres advisory
//! lock, which does not live in the Redis being repaired) repairs:
//!
//! 0. decides which sales to repair (`scope.rs`): on a cluster only those with a
//!    shard on a master whose identity changed, plus any missing a stock key; the
//!    others sell on through the repair (`Verified::scope`, `repair_scope`), and
//!    every step below concerns only the repaired sales;
//! 1. takes a new epoch in Postgres for this server, marked `repairing` (counters,
//!    whose keys carry the epoch, restart from their durable marks at once);
//! 2. waits until every order a relay published, or was about to, before that
//!    epoch is in Postgres or still in its outbox (the barrier: relays record
//!    their intents under the epoch row, see `barrier.rs`), however long a slow
//!    or frozen worker holds them;
//! 3. sale by sale, each in a transaction holding that sale's row: reads its
//!    orders from Postgres and the orders still in its outbox stream, and rewrites
//!    the sale in Redis (stock = Postgres stock − orders in the outbox, shoppers'
//!    marks, the order index, returned units), each write fenced by the epoch (the
//!    sales were closed, every shard's stock key dropped, as soon as the epoch was
//!    taken: a process that cannot reach Postgres sells nothing meanwhile);
//! 4. in one short transaction holding the epoch row: writes the epoch marker and
//!    the clock (at the value Postgres recorded); clears `repairing`.
//!
//! An order that was in a relay's or worker's hands across the repair carries the
//! old epoch; the worker accounts for it in Redis before storing it (see
//! [`crate::worker::persist`]).
mod barrier;
mod check;
mod clock;
mod durability;
mod repair;
mod restore;
mod scope;

use check::Checked;

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

/// Every how many checks a process sweeps the relay intents whose orders are stored.
const SWEEP_EVERY_CHECKS: u64 = 10;

/// The epoch row of a namespace.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct EpochRow {
    pub epoch: i64,
    pub server: String,
    pub repairing: bool,
    /// The highest Redis clock recorded (0 if none yet), whatever epoch recorded
    /// it: during a repair, the last finished epoch's value, which a server that
    /// did not go back is not below.
    pub clock: i64,
    /// While `repairing`: the sales under repair (`None`: every sale). Only a
    /// scope written by the repair of this very epoch counts.
    pub repair_scope: Option<Vec<i64>>,
}

pub async fn read_row(pg: &PgPool, namespace: &str) -> Result<Option<EpochRow>> {
    sqlx::query_as(
        "SELECT e.epoch, e.server, e.repairing, COALESCE(c.clock, 0) AS clock,
                CASE WHEN e.repair_scope_epoch = e.epoch THEN e.repair_scope END AS repair_scope
           FROM redis_epochs e
           LEFT JOIN redis_clocks c ON c.namespace = e.namespace
          WHERE e.namespace = $1",
    )
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
    /// How often a repair's barrier looks again at what it waits for.
    pub poll: Duration,
    pub metrics: Arc<crate::metrics::Metrics>,
    pub durability: std::sync::RwLock<Option<Durability>>,
}

impl EpochGuard {
    /// Checks at once, then every [`CHECK_EVERY`] and whenever a connection meets
    /// another server, until `stop`.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let identity = self.redis.identity().clone();
        let mut failures = 0u32;
        // The first check, and every check a distrust woke, reads every shard's stock
        // key; the periodic one reads shard 0's (see `check`).
        let mut every_shard = true;
        let mut rounds = 0u64;
        loop {
            rounds += 1;
            if rounds.is_multiple_of(SWEEP_EVERY_CHECKS) {
                // Intents whose orders are all stored are done with (see barrier.rs).
                if let Err(e) = crate::outbox::relay::intent::sweep(&self.pg, self.namespace()).await {
                    tracing::debug!(error = %format!("{e:#}"), "sweeping relay intents failed");
                }
            }
            match self.check_and_repair_reading(every_shard).await {
                Ok(()) => failures = 0,
                Err(e) => {
                    failures += 1;
                    if failures <= 3 || failures.is_multiple_of(30) {
                        tracing::warn!(error = %format!("{e:#}"), "checking the Redis epoch failed");
                    }
                }
            }
            every_shard = tokio::select! {
                _ = stop.cancelled() => return,
                _ = identity.suspect.notified() => true,
                _ = tokio::time::sleep(CHECK_EVERY) => false,
            };
        }
    }

    fn namespace(&self) -> &str {
        self.keys.namespace()
    }

    /// One check of every shard; repairs if needed (or waits for the process that
    /// repairs).
    pub async fn check_and_repair(&self) -> Result<()> {
        self.check_and_repair_reading(true).await
    }

    /// One check, of every shard's stock key or only of shard 0's (see `check`).
    async fn check_and_repair_reading(&self, every_shard: bool) -> Result<()> {
        let identity = self.redis.identity().clone();
        let Checked {
            healthy,
            run_id,
            row,
            clock_behind,
            ..
        } = match self.check(every_shard).await {
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
            let v = Verified::settled(run_id, row.epoch);
            if identity.get().as_ref() != Some(&v) {
                tracing::info!(epoch = v.epoch, run_id = %v.run_id, "Redis verified");
                identity.set(Some(v));
            }
            self.metrics.redis_repairing.set(0);
            return Ok(());
        }
        // Not healthy: no sales from this server until it is repaired. Counters may
        // go on where Postgres already gave this server an epoch (and it did not
        // go back within it: then `check` returns no row).
        // A repair under way of some sales only: the others go on, unless the clock
        // went back meanwhile (then nothing sells here; the repair stops at its
        // next look, and the next one takes every sale).
        identity.set(row.filter(|r| *r.server == *run_id).map(|r| {
            Verified {
                run_id: run_id.clone(),
                epoch: r.epoch,
                repairing: true,
                scope: (r.repairing && !clock_behind)
                    .then(|| r.repair_scope.map(Into::into))
                    .flatten(),
            }
        }));
        self.metrics.redis_repairing.set(1);
        self.repair().await
    }
}
