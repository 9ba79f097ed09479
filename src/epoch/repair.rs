//! The repair: one process at a time takes a new epoch, waits until every order
//! published before it is stored (the barrier), and rewrites every sale (see the
//! module above).
use super::check::Checked;
use super::guard::EpochGuard;
use super::row::{read_row, EpochRow};
use super::scope;
use crate::redis_conn::Verified;
use crate::voucher::stock::{self, Event};
use anyhow::{bail, Context, Result};

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
        let checked = self.check(true).await?;
        if checked.healthy {
            return Ok(());
        }
        let run_id = checked.run_id.clone();
        let previous = read_row(&self.pg, self.namespace()).await?;
        let first = previous.is_none();
        let known: Vec<(i64, i32)> = sqlx::query_as(&format!(
            "SELECT voucher_id, stock_shards FROM seckill_vouchers
              WHERE end_at > now() - interval '{KEEP_ENDED}' ORDER BY voucher_id"
        ))
        .fetch_all(&mut *lock)
        .await?;
        let scope::Scope {
            sales: scope,
            clock_explained,
        } = self.scope_of(&checked, previous.as_ref(), &known).await?;
        // Taking the row exclusively waits for every relay's intent transaction (they
        // hold it shared); once this commits, no relay can record an intent of an
        // older epoch, nor one of a sale in the scope, so the barrier's set is complete.
        let (epoch, started_at): (i64, chrono::DateTime<chrono::Utc>) = sqlx::query_as(
            "INSERT INTO redis_epochs (namespace, epoch, server, repairing, repair_started_at, repair_scope,
                                       repair_scope_epoch)
             VALUES ($1, 1, $2, true, now(), $3, 1)
             ON CONFLICT (namespace) DO UPDATE
               SET epoch = redis_epochs.epoch + 1, server = EXCLUDED.server, repairing = true, updated_at = now(),
                   repair_started_at = now(), repair_waiting = 0, repair_reason = NULL,
                   repair_scope = EXCLUDED.repair_scope, repair_scope_epoch = redis_epochs.epoch + 1
             RETURNING epoch, repair_started_at",
        )
        .bind(self.namespace())
        .bind(&*run_id)
        .bind(&scope)
        .fetch_one(&mut *lock)
        .await
        .context("taking a new Redis epoch")?;
        self.redis.identity().set(Some(Verified {
            run_id: run_id.clone(),
            epoch,
            repairing: true,
            scope: scope.clone().map(Into::into),
        }));
        let sales: Vec<i64> = match &scope {
            Some(s) => s.clone(),
            None => known.iter().map(|(v, _)| *v).collect(),
        };
        tracing::warn!(
            epoch,
            run_id = %run_id,
            sales = ?&sales[..sales.len().min(50)],
            every_sale = scope.is_none(),
            "Redis may have gone back in time (new server, missing epoch marker or lost sale state): \
             orders of these sales refused with 503 until they are repaired from Postgres"
        );
        self.close_sales(epoch, &sales).await?;
        let sound = Soundness {
            run_id: &run_id,
            clock_explained,
        };
        if !(first && sales.is_empty()) {
            self.barrier(epoch, scope.as_deref(), &sound).await?;
        }
        // One transaction per sale, each holding only that sale's row (as the worker
        // and cancellations take it): no transaction holds every voucher row, and
        // workers never wait behind the whole rebuild. What the rebuild reads is
        // complete: every order published before this epoch is stored or was in its
        // outbox when the barrier looked, and stays there (a relay's acknowledgement
        // is fenced by the shard's repair fence, which the close above set), and no
        // relay publishes while a repair is under way (intents are refused).
        let mut rebuilt: Vec<i64> = Vec::with_capacity(sales.len());
        for voucher in &sales {
            let mut tx = sqlx::Connection::begin(&mut *lock).await?;
            let now: i64 = sqlx::query_scalar("SELECT epoch FROM redis_epochs WHERE namespace = $1")
                .bind(self.namespace())
                .fetch_one(&mut *tx)
                .await?;
            if now != epoch {
                bail!("another repair took epoch {now} while this one ({epoch}) rebuilt");
            }
            let row: Option<(i32, i32)> =
                sqlx::query_as("SELECT stock, stock_shards FROM seckill_vouchers WHERE voucher_id = $1 FOR UPDATE")
                    .bind(voucher)
                    .fetch_optional(&mut *tx)
                    .await?;
            let Some((pg_stock, shards)) = row else { continue };
            self.restore_sale(&mut tx, epoch, *voucher, pg_stock, shards.max(1) as u32)
                .await?;
            // Postgres's stock already counts pending returns: Redis must not add them again.
            sqlx::query("UPDATE stock_returns SET done_at = now() WHERE voucher_id = $1 AND done_at IS NULL")
                .bind(voucher)
                .execute(&mut *tx)
                .await?;
            crate::voucher::topup::sales_rebuilt(&mut tx, std::slice::from_ref(voucher)).await?;
            tx.commit().await.context("committing a sale's rebuild")?;
            rebuilt.push(*voucher);
        }
        let mut tx = sqlx::Connection::begin(&mut *lock).await?;
        // Held to the commit: the epoch flips in one step.
        let now: i64 = sqlx::query_scalar("SELECT epoch FROM redis_epochs WHERE namespace = $1 FOR UPDATE")
            .bind(self.namespace())
            .fetch_one(&mut *tx)
            .await?;
        if now != epoch {
            bail!("another repair took epoch {now} while this one ({epoch}) rebuilt");
        }
        // The node's run_id, or every master's of a cluster, read again now, and
        // the clock not behind unless the scope explains it.
        self.still_sound(&sound).await?;
        let mut conn = self.redis.conn().await?;
        // The clock too: the repaired server must not be behind what Postgres recorded.
        super::clock::carry_over(&mut tx, &mut conn, &self.keys, epoch).await?;
        let () = redis::cmd("SET")
            .arg(self.keys.epoch())
            .arg(epoch)
            .query_async(&mut conn)
            .await
            .context("writing the epoch marker")?;
        sqlx::query(
            "UPDATE redis_epochs SET repairing = false, updated_at = now(), repair_started_at = NULL,
                    repair_waiting = 0, repair_reason = NULL, repair_scope = NULL, repair_scope_epoch = NULL
              WHERE namespace = $1",
        )
        .bind(self.namespace())
        .execute(&mut *tx)
        .await?;
        tx.commit().await.context("committing the repair")?;
        self.redis
            .identity()
            .set(Some(Verified::settled(run_id.clone(), epoch)));
        self.metrics.redis_repairs.inc();
        self.metrics.redis_repairing.set(0);
        let closed = (chrono::Utc::now() - started_at).to_std().unwrap_or_default();
        for voucher in &rebuilt {
            // Every instance forgets its sold-out flags.
            let _ = stock::publish(&self.redis, &self.keys, Event::Stock(*voucher)).await;
            self.metrics.repair_closed_seconds.observe(closed.as_secs_f64());
            tracing::warn!(
                epoch,
                voucher,
                closed_ms = closed.as_millis() as u64,
                "sale selling again after a repair"
            );
        }
        let swept = crate::outbox::relay::intent::sweep(&self.pg, self.namespace())
            .await
            .unwrap_or(0);
        tracing::warn!(
            epoch,
            sales = rebuilt.len(),
            closed_ms = closed.as_millis() as u64,
            intents_swept = swept,
            "Redis repaired from Postgres; selling again"
        );
        Ok(())
    }

    /// The sales this repair closes and rebuilds (`None`: every sale): see
    /// `scope.rs`. A repair that did not finish left its sales closed: they stay in.
    async fn scope_of(
        &self,
        checked: &Checked,
        previous: Option<&EpochRow>,
        known: &[(i64, i32)],
    ) -> Result<scope::Scope> {
        let every_sale = scope::Scope {
            sales: None,
            clock_explained: true,
        };
        let Some(previous) = previous else {
            return Ok(every_sale);
        };
        let masters = self.redis.masters_by_slot().await?;
        if let Some(m) = &masters {
            let mut ids: Vec<&str> = m.iter().map(|(id, _)| id.as_str()).collect();
            ids.sort_unstable();
            if ids.join(",") != *checked.run_id {
                bail!("the masters of the Redis Cluster changed while the repair read them");
            }
        }
        let slots: Vec<(i64, Vec<u16>)> = known
            .iter()
            .map(|(v, n)| {
                let n = (*n).max(1) as u32;
                let slots = (0..n).map(|k| crate::keys::slot(self.keys.stock_at(*v, k, n).as_bytes()));
                (*v, slots.collect())
            })
            .collect();
        let change = scope::Change {
            vouched: &previous.server,
            masters: masters.as_deref(),
            missing: &checked.missing,
            marker_slot: crate::keys::slot(self.keys.epoch().as_bytes()),
            marker_intact: checked.marker_intact,
        };
        let mut now = scope::sales_to_repair(&change, &slots);
        if previous.repairing {
            now.sales = scope::union(now.sales, previous.repair_scope.clone());
            now.clock_explained |= now.sales.is_none();
        }
        Ok(now)
    }

    /// Whether the server is still the one this repair took its epoch for: the same
    /// identity, and a clock not behind what Postgres recorded unless the scope
    /// explains it (its master changed). A change the scope misses (a master that
    /// went back during the repair, in the same process) stops the repair; the next
    /// one rebuilds what this one did and more.
    pub(super) async fn still_sound(&self, sound: &Soundness<'_>) -> Result<()> {
        if *self.redis.current_identity().await? != *sound.run_id {
            bail!("the Redis server changed during the repair");
        }
        if sound.clock_explained {
            return Ok(());
        }
        let recorded: i64 = sqlx::query_scalar("SELECT clock FROM redis_clocks WHERE namespace = $1")
            .bind(self.namespace())
            .fetch_optional(&self.pg)
            .await?
            .unwrap_or(0);
        let mut pipe = redis::pipe();
        super::clock::tick(&mut pipe, &self.keys.clock(), recorded);
        let mut conn = self.redis.conn().await?;
        let reply: Vec<redis::Value> = pipe.query_async(&mut conn).await.context("advancing the Redis clock")?;
        if !super::clock::read_tick(&reply[0])?.advanced {
            bail!("the Redis clock went back during the repair, on a master the repair does not rebuild");
        }
        Ok(())
    }
}

/// What must not change while a repair runs (see [`EpochGuard::still_sound`]).
pub(super) struct Soundness<'a> {
    pub run_id: &'a str,
    pub clock_explained: bool,
}
