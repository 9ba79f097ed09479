//! One sale's check, and its repair when the check finds a shard lost or behind:
//! under the sale's repair lease in Postgres (taken without waiting: whoever holds
//! it repairs, the others check after it), and waiting for no worker or relay
//! (see the module above).
use super::desk::Recovery;
use super::floors::GEN;
use crate::voucher::stock::{self, Event};
use anyhow::{bail, Context, Result};
use std::time::{Duration, Instant};

/// How long a repair lease lasts unless renewed (each step renews it).
const LEASE: Duration = Duration::from_secs(5);

/// Whether a sale's shards are all as they should be, as one check found them.
struct Health {
    /// Shards whose stock key is missing.
    missing: Vec<u32>,
    /// Shards whose sequence is below this process's floor or the sale's generation.
    behind: Vec<u32>,
}

impl Recovery {
    /// Under the sale's repair lease: records that the sale is closed, checks every
    /// shard, repairs the sale if one is lost or behind, and records it open again.
    /// True when the sale is sound (now or already); false if another process holds
    /// the lease (it repairs; this one checks after it).
    ///
    /// The lease is a row of Postgres's (`sale_states.repairer`, `repair_until`),
    /// taken without waiting and renewed at each step: a repairer that is frozen or
    /// cut off loses it once it runs out, and another takes the sale over. Every
    /// step of a repair is fenced in Redis (the generation, the exact sequence), so
    /// one that lost its lease writes nothing; and a lease is no session lock that
    /// a frozen process would hold for as long as its connection lives.
    pub(super) async fn check_or_repair(&self, voucher: i64, reason: &str) -> Result<bool> {
        // One at a time in this process: the lease names the process, not the task.
        let _one = self.one_repair.lock().await;
        if !self.take_lease(voucher).await? {
            return Ok(false);
        }
        let result = self.check_or_repair_locked(voucher, reason).await;
        self.drop_lease(voucher).await;
        result
    }

    /// Takes the sale's repair lease if nobody holds it (or its holder's ran out).
    async fn take_lease(&self, voucher: i64) -> Result<bool> {
        sqlx::query("INSERT INTO sale_states (namespace, voucher_id) VALUES ($1, $2) ON CONFLICT DO NOTHING")
            .bind(self.namespace())
            .bind(voucher)
            .execute(&self.pg)
            .await
            .context("making a sale's state")?;
        let got = sqlx::query(
            "UPDATE sale_states SET repairer = $3, repair_until = clock_timestamp() + make_interval(secs => $4)
              WHERE namespace = $1 AND voucher_id = $2
                AND (repairer IS NULL OR repairer = $3 OR repair_until < clock_timestamp())",
        )
        .bind(self.namespace())
        .bind(voucher)
        .bind(&self.me)
        .bind(LEASE.as_secs_f64())
        .execute(&self.pg)
        .await
        .context("taking a sale's repair lease")?
        .rows_affected();
        Ok(got == 1)
    }

    /// Renews the lease; an error if this process no longer holds it.
    pub(super) async fn renew_lease(&self, voucher: i64) -> Result<()> {
        let held = sqlx::query(
            "UPDATE sale_states SET repair_until = clock_timestamp() + make_interval(secs => $4)
              WHERE namespace = $1 AND voucher_id = $2 AND repairer = $3",
        )
        .bind(self.namespace())
        .bind(voucher)
        .bind(&self.me)
        .bind(LEASE.as_secs_f64())
        .execute(&self.pg)
        .await
        .context("renewing a sale's repair lease")?
        .rows_affected();
        if held != 1 {
            bail!("the repair lease of sale {voucher} ran out and was taken over; this repair stops");
        }
        Ok(())
    }

    async fn drop_lease(&self, voucher: i64) {
        let _ = sqlx::query(
            "UPDATE sale_states SET repairer = NULL, repair_until = NULL
              WHERE namespace = $1 AND voucher_id = $2 AND repairer = $3",
        )
        .bind(self.namespace())
        .bind(voucher)
        .bind(&self.me)
        .execute(&self.pg)
        .await;
    }

    async fn check_or_repair_locked(&self, voucher: i64, reason: &str) -> Result<bool> {
        let Some(shards) = self.shards_of(voucher).await? else {
            // No flash sale (deleted, or never one): nothing to sell, nothing to repair.
            return Ok(true);
        };
        let gen = self.gen(voucher).await?;
        let health = self.health(voucher, shards, gen).await?;
        if health.missing.is_empty() && health.behind.is_empty() {
            self.reopened(voucher, None).await?;
            return Ok(true);
        }
        sqlx::query(
            "INSERT INTO sale_states (namespace, voucher_id, closed_since, last_reason) VALUES ($1, $2, now(), $3)
             ON CONFLICT (namespace, voucher_id) DO UPDATE
               SET closed_since = COALESCE(sale_states.closed_since, now()), last_reason = $3, updated_at = now()",
        )
        .bind(self.namespace())
        .bind(voucher)
        .bind(reason)
        .execute(&self.pg)
        .await
        .context("recording a closed sale")?;
        self.repair(voucher, shards, &health).await?;
        Ok(true)
    }

    /// The sale's shards, if it is a flash sale.
    async fn shards_of(&self, voucher: i64) -> Result<Option<u32>> {
        crate::voucher::repo::flash_shards(&self.pg, voucher)
            .await
            .context("reading a sale's shards")
    }

    /// The sale's generation in Postgres (0 before its first repair).
    async fn gen(&self, voucher: i64) -> Result<i64> {
        Ok(
            sqlx::query_scalar("SELECT gen FROM sale_states WHERE namespace = $1 AND voucher_id = $2")
                .bind(self.namespace())
                .bind(voucher)
                .fetch_optional(&self.pg)
                .await
                .context("reading a sale's generation")?
                .unwrap_or(0),
        )
    }

    /// Every shard's stock key and sequence, against this process's floors and the
    /// sale's generation.
    async fn health(&self, voucher: i64, shards: u32, gen: i64) -> Result<Health> {
        // The floors as they stand before Redis is read: a floor is a sequence some
        // reply carried, so each is at most what the shard held when it is read,
        // unless the shard went back. Read after, a floor raised meanwhile by an
        // order of this process would be above the sequence read before it: a
        // healthy shard taken for one that went back.
        let floors: Vec<i64> = (0..shards)
            .map(|k| self.floors.get(&crate::keys::shard_tag(voucher, k, shards)))
            .collect();
        let mut conn = self.redis.conn().await?;
        let mut pipe = redis::pipe();
        for k in 0..shards {
            pipe.exists(self.keys.stock_at(voucher, k, shards))
                .get(self.keys.seq_at(voucher, k, shards));
        }
        let reply: Vec<(bool, Option<i64>)> = {
            let flat: Vec<redis::Value> = pipe.query_async(&mut conn).await.context("reading a sale's shards")?;
            flat.chunks(2)
                .map(|c| {
                    (
                        redis::from_redis_value_ref::<bool>(&c[0]).unwrap_or(false),
                        redis::from_redis_value_ref::<Option<i64>>(&c[1]).ok().flatten(),
                    )
                })
                .collect()
        };
        let mut health = Health {
            missing: Vec::new(),
            behind: Vec::new(),
        };
        for ((k, (exists, seq)), floor) in reply.into_iter().enumerate().zip(floors) {
            let k = k as u32;
            let seq = seq.unwrap_or(0);
            if !exists {
                health.missing.push(k);
            }
            if seq < floor.max(gen * GEN) {
                health.behind.push(k);
            }
        }
        Ok(health)
    }

    /// Rebuilds the sale in a new generation (see the module above).
    async fn repair(&self, voucher: i64, shards: u32, health: &Health) -> Result<()> {
        let started = Instant::now();
        // Only while this process holds the lease: a repairer that lost it (frozen
        // past it) must not start a generation under the one that took over.
        let gen: Option<i64> = sqlx::query_scalar(
            "UPDATE sale_states SET gen = gen + 1, updated_at = now()
              WHERE namespace = $1 AND voucher_id = $2 AND repairer = $3 AND repair_until > clock_timestamp()
              RETURNING gen",
        )
        .bind(self.namespace())
        .bind(voucher)
        .bind(&self.me)
        .fetch_optional(&self.pg)
        .await
        .context("taking a sale's next generation")?;
        let Some(gen) = gen else {
            bail!("the repair lease of sale {voucher} ran out before its next generation; this repair stops");
        };
        tracing::warn!(
            voucher,
            gen,
            missing = ?health.missing,
            behind = ?health.behind,
            "repairing a sale from Postgres and its outboxes"
        );
        let mut seqs = self.reset(voucher, shards, gen).await?;
        self.renew_lease(voucher).await?;
        let books = self.books(voucher, shards).await?;
        self.renew_lease(voucher).await?;
        self.rebuild(voucher, shards, gen, &books, &mut seqs).await?;
        self.renew_lease(voucher).await?;
        for (k, seq) in seqs.iter().enumerate() {
            self.floors
                .raise(&crate::keys::shard_tag(voucher, k as u32, shards), *seq);
        }
        let closed_ms = self.reopened(voucher, Some(gen)).await?;
        self.metrics.redis_repairs.inc();
        self.metrics.repair_closed_seconds.observe(closed_ms as f64 / 1000.0);
        // Every instance forgets its sold-out flag.
        let _ = stock::publish(&self.redis, &self.keys, Event::Stock(voucher)).await;
        tracing::warn!(
            voucher,
            gen,
            shards,
            stock_left = books.stock_left(),
            persisted = books.stored.len(),
            in_flight = books.in_flight.len(),
            repair_ms = started.elapsed().as_millis() as u64,
            closed_ms,
            "sale repaired; selling again"
        );
        Ok(())
    }

    /// Records the sale open (a repair of generation `gen` finished, or a check
    /// found it sound): its closure's time added to its total. Returns that time.
    async fn reopened(&self, voucher: i64, gen: Option<i64>) -> Result<i64> {
        let closed: Option<i64> = sqlx::query_scalar(
            "WITH old AS (SELECT closed_since FROM sale_states
                           WHERE namespace = $1 AND voucher_id = $2 FOR UPDATE)
             UPDATE sale_states s
                SET closed_ms = s.closed_ms
                        + COALESCE((extract(epoch FROM now() - old.closed_since) * 1000)::bigint, 0),
                    repairs = s.repairs + $3::int, closed_since = NULL, updated_at = now()
               FROM old
              WHERE s.namespace = $1 AND s.voucher_id = $2 AND (old.closed_since IS NOT NULL OR $3::int > 0)
              RETURNING COALESCE((extract(epoch FROM now() - old.closed_since) * 1000)::bigint, 0)",
        )
        .bind(self.namespace())
        .bind(voucher)
        .bind(i32::from(gen.is_some()))
        .fetch_optional(&self.pg)
        .await
        .context("recording a sale open again")?;
        Ok(closed.unwrap_or(0))
    }

    /// Resets every shard to generation `gen`; returns each shard's sequence.
    async fn reset(&self, voucher: i64, shards: u32, gen: i64) -> Result<Vec<i64>> {
        let mut conn = self.redis.conn().await?;
        let mut seqs = Vec::with_capacity(shards as usize);
        for k in 0..shards {
            let (ok, seq): (i64, i64) = self
                .restore_script(voucher, k, shards, gen, "reset", 0)
                .invoke_async(&mut conn)
                .await
                .context("sale_restore.lua reset")?;
            if ok != 1 {
                bail!("a newer repair took shard {k} of sale {voucher} (at {seq}); this one ({gen}) stops");
            }
            seqs.push(seq);
        }
        Ok(seqs)
    }
}
