//! A worker's heartbeat: what it holds (deliveries received and not settled,
//! counted while held), reported to Postgres (`worker_heartbeats`) for people to
//! read in `GET /api/v1/admin/redis`; nothing is decided from it.
use super::setup::Worker;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

impl Worker {
    /// Tells Postgres what this process holds, every
    /// `every`, until `stop`; removes its row on the way out.
    pub async fn heartbeat(self: Arc<Self>, every: Duration, stop: CancellationToken) {
        let ns = self.ctx.keys.namespace().to_owned();
        loop {
            let holding = self.holding.load(Ordering::Acquire) as i32;
            let beat = sqlx::query(
                "INSERT INTO worker_heartbeats (namespace, process, holding, seen_at) VALUES ($1, $2, $3, now())
                 ON CONFLICT (namespace, process) DO UPDATE SET holding = EXCLUDED.holding, seen_at = now()",
            )
            .bind(&ns)
            .bind(&self.process)
            .bind(holding)
            .execute(&self.ctx.pg)
            .await;
            if let Err(e) = beat {
                tracing::debug!(error = %e, "worker heartbeat failed");
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(every) => {}
            }
        }
        let _ = sqlx::query("DELETE FROM worker_heartbeats WHERE namespace = $1 AND process = $2")
            .bind(&ns)
            .bind(&self.process)
            .execute(&self.ctx.pg)
            .await;
    }
}

/// Counts deliveries as held while it lives.
pub(super) struct Held<'a> {
    holding: &'a AtomicUsize,
    n: usize,
}

impl<'a> Held<'a> {
    pub(super) fn new(holding: &'a AtomicUsize, n: usize) -> Self {
        holding.fetch_add(n, Ordering::AcqRel);
        Self { holding, n }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.holding.fetch_sub(self.n, Ordering::AcqRel);
    }
}

/// A worker's last heartbeat.
#[derive(Debug, sqlx::FromRow)]
pub struct Heartbeat {
    pub process: String,
    /// Deliveries it held, unsettled.
    pub holding: i32,
    pub seen_at: chrono::DateTime<chrono::Utc>,
}

/// The last `limit` heartbeats of the namespace's workers, newest first.
pub async fn last(pg: &sqlx::PgPool, namespace: &str, limit: i64) -> Result<Vec<Heartbeat>, sqlx::Error> {
    sqlx::query_as(
        "SELECT process, holding, seen_at FROM worker_heartbeats WHERE namespace = $1 ORDER BY seen_at DESC LIMIT $2",
    )
    .bind(namespace)
    .bind(limit)
    .fetch_all(pg)
    .await
}
