//! The repair: one process at a time takes a new epoch, waits until nothing from
//! before can still arrive, and rewrites every sale (see the module above).
use super::{read_row, EpochGuard};
use crate::redis_conn::Verified;
use crate::voucher::stock::{self, Event};
use anyhow::{bail, Context, Result};
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use std::time::Duration;

/// A worker that has not beaten for this long is taken for dead.
const WORKER_LIVE: Duration = Duration::from_secs(5);
/// Sales that ended longer ago than this are not rebuilt.
const KEEP_ENDED: &str = "7 days";

impl EpochGuard {
    /// Repairs under the Postgres advisory lock; returns at once if another process
    /// holds it (that process repairs; this one checks again soon).
    pub(super) async fn repair(&self) -> Result<()> {
        // A connection of its own, never from the pool: if this future is dropped
        // mid-repair the connection closes and the session lock goes with it.
        let mut lock = <sqlx::postgres::PgConnection as sqlx::Connection>::connect_with(&self.pg.connect_options())
            .await
            .context("a connection for the repair lock")?;
        let key = format!("seckill-redis-repair:{}", self.namespace());
        let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtextextended($1, 0))")
            .bind(&key)
            .fetch_one(&mut lock)
            .await?;
        if !got {
            return Ok(());
        }
        let result = self.repair_locked(&mut lock).await;
        // Closing the session releases the lock.
        let _ = sqlx::Connection::close(lock).await;
        result
    }

    async fn repair_locked(&self, lock: &mut sqlx::PgConnection) -> Result<()> {
        // Someone may have finished while we waited for the lock.
        let (healthy, run_id, _) = self.check().await?;
        if healthy {
            return Ok(());
        }
        let first = read_row(&self.pg, self.namespace()).await?.is_none();
        let epoch: i64 = sqlx::query_scalar(
            "INSERT INTO redis_epochs (namespace, epoch, server, repairing) VALUES ($1, 1, $2, true)
             ON CONFLICT (namespace) DO UPDATE
               SET epoch = redis_epochs.epoch + 1, server = EXCLUDED.server, repairing = true, updated_at = now()
             RETURNING epoch",
        )
        .bind(self.namespace())
        .bind(&*run_id)
        .fetch_one(&mut *lock)
        .await
        .context("taking a new Redis epoch")?;
        self.redis.identity().set(Some(Verified {
            run_id: run_id.clone(),
            epoch,
            repairing: true,
        }));
        tracing::warn!(
            epoch,
            run_id = %run_id,
            "Redis may have gone back in time (new server, missing epoch marker or lost sale state): \
             orders refused with 503 until every sale is repaired from Postgres"
        );
        let sales: Vec<i64> = sqlx::query_scalar(&format!(
            "SELECT voucher_id FROM seckill_vouchers WHERE end_at > now() - interval '{KEEP_ENDED}' ORDER BY voucher_id"
        ))
        .fetch_all(&mut *lock)
        .await?;
        if !(first && sales.is_empty()) {
            self.wait_for_drain(&sales).await?;
        }
        let mut tx = sqlx::Connection::begin(&mut *lock).await?;
        // Held to the commit: no worker transaction commits orders in between.
        let now: i64 = sqlx::query_scalar("SELECT epoch FROM redis_epochs WHERE namespace = $1 FOR UPDATE")
            .bind(self.namespace())
            .fetch_one(&mut *tx)
            .await?;
        if now != epoch {
            bail!("another repair took epoch {now} while this one ({epoch}) waited");
        }
        // Locked in id order (as the worker does): cancellations wait too.
        let stocks: Vec<(i64, i32, i32)> = sqlx::query_as(
            "SELECT voucher_id, stock, stock_shards FROM seckill_vouchers
              WHERE voucher_id = ANY($1) ORDER BY voucher_id FOR UPDATE",
        )
        .bind(&sales)
        .fetch_all(&mut *tx)
        .await?;
        let mut rebuilt = 0usize;
        for (voucher, pg_stock, shards) in &stocks {
            self.restore_sale(&mut tx, epoch, *voucher, *pg_stock, (*shards).max(1) as u32)
                .await?;
            rebuilt += 1;
        }
        // Postgres's stock already counts pending returns: Redis must not add them again.
        sqlx::query("UPDATE stock_returns SET done_at = now() WHERE voucher_id = ANY($1) AND done_at IS NULL")
            .bind(&sales)
            .execute(&mut *tx)
            .await?;
        crate::voucher::topup::sales_rebuilt(&mut tx, &sales).await?;
        // The node's run_id, or every master's of a cluster, read again now.
        if self.redis.current_identity().await? != run_id {
            bail!("the Redis server changed during the repair");
        }
        let mut conn = self.redis.conn().await?;
        let () = redis::cmd("SET")
            .arg(self.keys.epoch())
            .arg(epoch)
            .query_async(&mut conn)
            .await
            .context("writing the epoch marker")?;
        sqlx::query("UPDATE redis_epochs SET repairing = false, updated_at = now() WHERE namespace = $1")
            .bind(self.namespace())
            .execute(&mut *tx)
            .await?;
        tx.commit().await.context("committing the repair")?;
        self.redis.identity().set(Some(Verified {
            run_id: run_id.clone(),
            epoch,
            repairing: false,
        }));
        self.metrics.redis_repairs.inc();
        self.metrics.redis_repairing.set(0);
        for (voucher, _, _) in &stocks {
            // Every instance forgets its sold-out flags.
            let _ = stock::publish(&self.redis, &self.keys, Event::Stock(*voucher)).await;
        }
        tracing::warn!(epoch, sales = rebuilt, "Redis repaired from Postgres; selling again");
        Ok(())
    }

    /// Until nothing from before the repair can still arrive: the orders queue and
    /// the dead-letter queue are empty in two rounds `quiet` apart, every live worker
    /// has said since the first that it holds nothing (workers beat every
    /// [`crate::worker::HEARTBEAT_EVERY`], less than `quiet`), and the sales'
    /// persisted orders did not change in between.
    async fn wait_for_drain(&self, vouchers: &[i64]) -> Result<()> {
        // The previous round, if the queues were empty then: when, and the count.
        let mut previous: Option<(chrono::DateTime<chrono::Utc>, i64)> = None;
        loop {
            let since: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()").fetch_one(&self.pg).await?;
            let (ready, dead) = self.queued().await?;
            let count: i64 = sqlx::query_scalar("SELECT count(*) FROM voucher_orders WHERE voucher_id = ANY($1)")
                .bind(vouchers)
                .fetch_one(&self.pg)
                .await?;
            if ready > 0 || dead > 0 {
                previous = None;
            } else {
                if let Some((empty_at, last)) = previous {
                    // Every worker seen in the last seconds (a dead one stops beating,
                    // and its deliveries go back to the queue with its connection) has
                    // said, since the queues were seen empty, that it holds nothing.
                    let hands: Vec<(chrono::DateTime<chrono::Utc>, i32)> = sqlx::query_as(
                        "SELECT seen_at, holding FROM worker_heartbeats
                          WHERE namespace = $1 AND seen_at > now() - make_interval(secs => $2)",
                    )
                    .bind(self.namespace())
                    .bind(WORKER_LIVE.as_secs_f64())
                    .fetch_all(&self.pg)
                    .await?;
                    let empty = hands.iter().all(|(at, n)| *at > empty_at && *n == 0);
                    if empty && count == last {
                        return Ok(());
                    }
                }
                previous = Some((since, count));
            }
            tokio::time::sleep(self.quiet).await;
        }
    }

    /// Messages ready in the orders queue and in the dead-letter queue.
    async fn queued(&self) -> Result<(u32, u32)> {
        let (conn, ch) = self.broker.open().await?;
        let passive = QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        let k = self.broker.keys();
        let orders = ch
            .queue_declare(k.orders_queue().into(), passive, FieldTable::default())
            .await
            .context("reading the orders queue depth")?;
        let dead = ch
            .queue_declare(k.dead_queue().into(), passive, FieldTable::default())
            .await
            .context("reading the dead-letter queue depth")?;
        let _ = conn.close(200, "checked".into()).await;
        Ok((orders.message_count(), dead.message_count()))
    }
}
