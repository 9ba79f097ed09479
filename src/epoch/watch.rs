//! The guard at work: a check every second and whenever a connection meets
//! another server, what the process may sell after it, and the repair when the
//! check finds the server unsound.
use super::check::Checked;
use super::guard::EpochGuard;
use crate::redis_conn::Verified;
use anyhow::Result;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often every process checks the server it talks to.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Every how many checks a process sweeps the relay intents whose orders are stored.
const SWEEP_EVERY_CHECKS: u64 = 10;

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
