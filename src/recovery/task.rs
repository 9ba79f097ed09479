//! The recovery desk's task: the floors refreshed from Postgres every
//! [`REFRESH_EVERY`] (and the relays' intents swept), and the repairs asked for
//! run on a loop of their own.
use super::desk::{Recovery, REFRESH_EVERY};
use anyhow::Result;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Every how many rounds a process sweeps the relay intents whose orders are stored.
const SWEEP_EVERY_ROUNDS: u64 = 10;

impl Recovery {
    /// Until `stop`: the floors refreshed every [`REFRESH_EVERY`], and, on a task
    /// of their own (a long repair must not hold the floors back), the repairs asked
    /// for, at once and then every [`REFRESH_EVERY`] until each is done.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        tokio::join!(self.clone().refresh_loop(stop.clone()), self.repair_loop(stop));
    }

    async fn refresh_loop(self: Arc<Self>, stop: CancellationToken) {
        let mut failures = 0u32;
        for round in 1u64.. {
            if round.is_multiple_of(SWEEP_EVERY_ROUNDS) {
                // Intents whose orders are all stored are done with.
                if let Err(e) = crate::ordering::outbox::sweep_intents(&self.pg, self.namespace()).await {
                    tracing::debug!(error = %format!("{e:#}"), "sweeping relay intents failed");
                }
            }
            if self.durability.read().expect("durability poisoned").is_none() {
                self.note_durability().await;
            }
            match self.refresh().await {
                Ok(()) => failures = 0,
                Err(e) => {
                    failures += 1;
                    if failures <= 3 || failures.is_multiple_of(30) {
                        tracing::warn!(error = %format!("{e:#}"), "refreshing the shards' floors failed");
                    }
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(REFRESH_EVERY) => {}
            }
        }
    }

    async fn repair_loop(self: Arc<Self>, stop: CancellationToken) {
        loop {
            self.repairs().await;
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(REFRESH_EVERY) => {}
            }
        }
    }

    /// Reads and logs once what Redis says of its persistence (`/health/ready`
    /// shows it).
    async fn note_durability(&self) {
        let Ok(mut conn) = self.redis.conn().await else { return };
        let d = super::durability(&mut conn).await;
        if !d.safe {
            tracing::warn!(aof = %d.aof, replicas = d.replicas, at_risk = %d.at_risk, "Redis durability");
        } else {
            tracing::info!(aof = %d.aof, "Redis durability: acknowledged orders survive a Redis crash");
        }
        *self.durability.write().expect("durability poisoned") = Some(d);
    }

    /// One round: the floors from Postgres, then each sale asked for.
    pub async fn round(&self) -> Result<()> {
        self.refresh().await?;
        self.repairs().await;
        Ok(())
    }

    /// Each sale asked for, once: taken off the requests before it is handled (a
    /// report that arrives meanwhile asks again), put back if it is not done.
    async fn repairs(&self) {
        // Orders held in memory first: those of a sale not repaired yet go into an
        // intent the coming repair counts; after the repairs, those of a sale
        // repaired since are admitted again (see `super::rescue`).
        self.settle_rescued_logged().await;
        let asked: Vec<(i64, String)> = self.requests.lock().expect("requests poisoned").drain().collect();
        // At once: a small sale another instance repaired in milliseconds opens
        // here while this process repairs a large one.
        let handled = futures::future::join_all(asked.iter().map(|(v, reason)| self.handle(*v, reason))).await;
        for ((voucher, reason), done) in asked.into_iter().zip(handled) {
            if !done {
                self.requests
                    .lock()
                    .expect("requests poisoned")
                    .entry(voucher)
                    .or_insert(reason);
            }
        }
        self.settle_rescued_logged().await;
    }

    async fn settle_rescued_logged(&self) {
        if let Err(e) = self.settle_rescued().await {
            tracing::warn!(error = %format!("{e:#}"), "settling acknowledged orders held in memory failed; retrying");
        }
    }

    /// Checks or repairs one sale asked for; true when it is open again (here).
    /// False while another process holds the sale's repair lease (it repairs; this
    /// one checks after it) or Redis or Postgres does not answer.
    async fn handle(&self, voucher: i64, reason: &str) -> bool {
        match self.check_or_repair(voucher, reason).await {
            Ok(true) => {
                if let Some(closed) = self.closed.open(voucher) {
                    self.metrics.redis_repairing.set(self.closed.list().len() as i64);
                    tracing::info!(
                        voucher,
                        closed_ms = closed.as_millis() as u64,
                        "sale open again in this process"
                    );
                }
                true
            }
            Ok(false) => false,
            Err(e) => {
                tracing::warn!(voucher, error = %format!("{e:#}"), "checking or repairing a sale failed; retrying");
                false
            }
        }
    }
}
