//! The repair's barrier: before a repair rebuilds its sales from Postgres and the
//! outboxes, every order that left an outbox under an older epoch must be in
//! Postgres. Which orders those are is an exact, durable fact: each relay records
//! what it is about to publish (`relay_intents`, see
//! [`crate::outbox::relay::intent`]) under the epoch row, and once the repair has
//! taken its new epoch no older intent can be added. The barrier waits until each of
//! them is in `voucher_orders` or still in its outbox stream (published, then its
//! entry not yet acknowledged, or never published: the rebuild counts it from
//! there). An order held by a slow, frozen or partitioned worker, ready in the
//! queue, or in a publish awaiting its confirm is in neither: the barrier waits for
//! it, however long (no quiet period and no "worker seen lately" decides anything;
//! time only decides how long the sales stay closed). While it waits, operators see
//! how many orders and why (`redis_epochs.repair_waiting` and `repair_reason`,
//! served by `GET /api/v1/admin/redis`), and a log line says it every few seconds.
//! An operator who knows those orders are gone for good (a broker that lost its
//! disk) can abandon them (`POST /api/v1/admin/redis/abandon`): the one decision
//! here that is not a fact, and it is a person's, logged as an incident.
use super::guard::EpochGuard;
use super::repair::Soundness;
use crate::outbox::relay::intent;
use anyhow::{Context, Result};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// How often a waiting barrier logs what it waits for.
const LOG_EVERY: Duration = Duration::from_secs(5);

impl EpochGuard {
    /// Returns once every order of an intent older than `epoch` of a sale in
    /// `scope` (`None`: any sale) is stored or in an outbox. The other sales are not
    /// rebuilt: what their Redis state counts stands.
    ///
    /// Each look also checks that the server is still the one the repair is for
    /// (`sound`): a change meanwhile stops the repair at once rather than at its end.
    pub(super) async fn barrier(&self, epoch: i64, scope: Option<&[i64]>, sound: &Soundness<'_>) -> Result<()> {
        let started = Instant::now();
        let mut last_log: Option<Instant> = None;
        let mut last_recorded: Option<usize> = None;
        loop {
            self.still_sound(sound).await?;
            let waiting = self.published_and_unstored(epoch, scope).await?;
            if last_recorded != Some(waiting.len()) {
                self.record_waiting(epoch, &waiting).await?;
                last_recorded = Some(waiting.len());
            }
            if waiting.is_empty() {
                if started.elapsed() >= LOG_EVERY {
                    tracing::warn!(
                        epoch,
                        waited_ms = started.elapsed().as_millis() as u64,
                        "repair: every published order is stored"
                    );
                }
                return Ok(());
            }
            if self.abandoned(epoch).await? {
                // Given up for good: no later repair waits for them again.
                // (An intent that also names sales outside the scope stays: a later
                // repair of those sales waits for its orders again.)
                sqlx::query(
                    "DELETE FROM relay_intents WHERE namespace = $1 AND epoch < $2
                        AND ($3::bigint[] IS NULL OR voucher_ids <@ $3)",
                )
                .bind(self.namespace())
                .bind(epoch)
                .bind(scope)
                .execute(&self.pg)
                .await
                .context("forgetting the abandoned intents")?;
                tracing::error!(
                    epoch,
                    orders = waiting.len(),
                    ids = ?&waiting[..waiting.len().min(50)],
                    "INCIDENT: an operator abandoned what the repair waited for; the repair goes on without \
                     these orders (if one arrives after all, it is stored failed when its unit or shopper \
                     was sold again)"
                );
                return Ok(());
            }
            if last_log.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
                last_log = Some(Instant::now());
                let workers = self.workers_seen().await.unwrap_or_default();
                tracing::warn!(
                    epoch,
                    orders = waiting.len(),
                    example = waiting[0],
                    waited_ms = started.elapsed().as_millis() as u64,
                    workers = %workers,
                    "repair waits: orders published before it are not stored yet (in RabbitMQ or a worker's hands); \
                     their sales stay closed until they are"
                );
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    /// Orders of sales in `scope` of intents older than `epoch` in neither Postgres
    /// nor their outbox.
    async fn published_and_unstored(&self, epoch: i64, scope: Option<&[i64]>) -> Result<Vec<i64>> {
        let unstored = intent::unstored_before(&self.pg, self.namespace(), epoch, scope).await?;
        if unstored.is_empty() {
            return Ok(Vec::new());
        }
        let vouchers: Vec<i64> = {
            let mut v: Vec<i64> = unstored.iter().map(|(_, v)| *v).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let shards: HashMap<i64, i32> =
            sqlx::query_as("SELECT voucher_id, stock_shards FROM seckill_vouchers WHERE voucher_id = ANY($1)")
                .bind(&vouchers)
                .fetch_all(&self.pg)
                .await?
                .into_iter()
                .collect();
        let mut conn = self.redis.conn().await?;
        let mut in_outbox = HashSet::new();
        for v in &vouchers {
            let n = shards.get(v).copied().unwrap_or(1).max(1) as u32;
            for shard in 0..n {
                let stream = self.keys.outbox_at(*v, shard, n);
                for o in super::restore::read_outbox(&mut conn, &stream).await? {
                    in_outbox.insert(o.id);
                }
            }
        }
        let mut waiting: Vec<i64> = unstored
            .into_iter()
            .map(|(id, _)| id)
            .filter(|id| !in_outbox.contains(id))
            .collect();
        waiting.sort_unstable();
        Ok(waiting)
    }

    /// Whether an operator abandoned what the repair of `epoch` waits for.
    async fn abandoned(&self, epoch: i64) -> Result<bool> {
        let at: Option<Option<i64>> = sqlx::query_scalar("SELECT abandon_epoch FROM redis_epochs WHERE namespace = $1")
            .bind(self.namespace())
            .fetch_optional(&self.pg)
            .await?;
        Ok(at.flatten() == Some(epoch))
    }

    /// What the repair waits for, where any process's admin API can show it.
    async fn record_waiting(&self, epoch: i64, waiting: &[i64]) -> Result<()> {
        let reason = (!waiting.is_empty()).then(|| {
            format!(
                "waiting for {} order(s) published before epoch {epoch} to be stored (in RabbitMQ or held by a \
                 worker); e.g. order {}",
                waiting.len(),
                waiting[0]
            )
        });
        sqlx::query(
            "UPDATE redis_epochs SET repair_waiting = $3, repair_reason = $4
              WHERE namespace = $1 AND epoch = $2",
        )
        .bind(self.namespace())
        .bind(epoch)
        .bind(waiting.len() as i32)
        .bind(reason)
        .execute(&self.pg)
        .await
        .context("recording what the repair waits for")?;
        Ok(())
    }

    /// The workers' own last word (`worker_heartbeats`), for the log: informative
    /// only, it decides nothing.
    async fn workers_seen(&self) -> Result<String> {
        let rows: Vec<(String, i32, f64)> = sqlx::query_as(
            "SELECT process, holding, extract(epoch FROM now() - seen_at)::float8
               FROM worker_heartbeats WHERE namespace = $1 ORDER BY seen_at DESC LIMIT 5",
        )
        .bind(self.namespace())
        .fetch_all(&self.pg)
        .await?;
        if rows.is_empty() {
            return Ok("no worker has ever beaten".into());
        }
        Ok(rows
            .iter()
            .map(|(p, h, ago)| format!("{p} holding {h}, seen {ago:.1} s ago"))
            .collect::<Vec<_>>()
            .join("; "))
    }
}
