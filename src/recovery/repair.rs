//! One sale's check, and its repair when the check finds a shard lost or behind:
//! under the sale's repair lease in Postgres (taken without waiting: whoever holds
//! it repairs, the others check after it; renewed all the while the repairer
//! works, whatever it waits for), and waiting for no worker or relay (see the
//! module above). Different sales are checked and repaired at once.
use super::desk::Recovery;
use super::history::{read_shard, Call, Point, GEN};
use crate::sales::stock::{self, Event};
use anyhow::{bail, Context, Result};
use std::time::Instant;

/// Whether a sale's shards are all as they should be, as one check found them.
struct Health {
    /// Shards whose stock key is missing.
    missing: Vec<u32>,
    /// Shards that no longer hold a point of this process's, or are below the
    /// sale's generation.
    behind: Vec<u32>,
}

impl Recovery {
    /// Under the sale's repair lease: records that the sale is closed, checks every
    /// shard, repairs the sale if one is lost or behind, and records it open again.
    /// True when the sale is sound (now or already); false if another process holds
    /// the lease (it repairs; this one checks after it), or this process is on the
    /// sale already.
    ///
    /// The lease is a row of Postgres's (`sale_states.repairer`, `repair_until`),
    /// taken without waiting and renewed every third of it while the work goes on
    /// ([`Recovery::keep_lease`]): a repairer that is frozen or cut off loses it
    /// once it runs out, and another takes the sale over. Every step of a repair is
    /// fenced in Redis (the generation, the exact sequence), so one that lost its
    /// lease writes nothing; and a lease is no session lock that a frozen process
    /// would hold for as long as its connection lives.
    pub(super) async fn check_or_repair(&self, voucher: i64, reason: &str) -> Result<bool> {
        if !self.repairing.lock().expect("repairing poisoned").insert(voucher) {
            return Ok(false);
        }
        let result = self.check_or_repair_leased(voucher, reason).await;
        self.repairing.lock().expect("repairing poisoned").remove(&voucher);
        result
    }

    async fn check_or_repair_leased(&self, voucher: i64, reason: &str) -> Result<bool> {
        if !self.take_lease(voucher).await? {
            return Ok(false);
        }
        let result = tokio::select! {
            r = self.check_or_repair_locked(voucher, reason) => r,
            lost = self.keep_lease(voucher) => Err(lost),
        };
        self.drop_lease(voucher).await;
        result
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
        crate::sales::repo::flash_shards(&self.pg, voucher)
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

    /// Every shard's stock key, and whether it holds this process's points and the
    /// sale's generation (`lua/shard_read.lua`).
    async fn health(&self, voucher: i64, shards: u32, gen: i64) -> Result<Health> {
        let mut conn = self.redis.conn().await?;
        let mut health = Health {
            missing: Vec::new(),
            behind: Vec::new(),
        };
        for k in 0..shards {
            let tag = crate::keys::shard_tag(voucher, k, shards);
            let call = Call::on(self.histories.shard(&tag)).and(Point::gen_start(gen));
            let read = read_shard(&mut conn, &self.keys, &tag, &call.snap, None).await?;
            if !read.open {
                health.missing.push(k);
            }
            if read.lost {
                health.behind.push(k);
            } else {
                call.passed(read.seq, false);
            }
        }
        Ok(health)
    }

    /// Rebuilds the sale in a new generation (see the module above): every shard
    /// closed first, then read, then written back.
    async fn repair(&self, voucher: i64, shards: u32, health: &Health) -> Result<()> {
        let started = Instant::now();
        self.rescue_before_repair(voucher).await?;
        let (gen, mut seqs) = self.close_all(voucher, shards).await?;
        tracing::warn!(
            voucher,
            gen,
            missing = ?health.missing,
            behind = ?health.behind,
            "repairing a sale from Postgres and its outboxes"
        );
        let books = self.books(voucher, shards).await?;
        self.rebuild(voucher, shards, gen, &books, &mut seqs).await?;
        let closed_ms = self.reopened(voucher, Some(gen)).await?;
        self.forget_points_before(voucher, shards, gen).await;
        for k in 0..shards {
            let tag = crate::keys::shard_tag(voucher, k, shards).to_string();
            let older = self.histories.shard(&tag).raise_gen(gen);
            self.rescue(&tag, older);
        }
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
            held_back = books.held_back,
            repair_ms = started.elapsed().as_millis() as u64,
            closed_ms,
            "sale repaired; selling again"
        );
        Ok(())
    }

    /// Takes the generation of this repair and closes every shard in it
    /// (`sale_restore.lua` `close`); returns the generation and each shard's
    /// sequence. A repair that could not finish is tried again in its generation
    /// (`sale_states.repair_gen`) while every shard is as its close left it;
    /// otherwise the sale takes the next one.
    async fn close_all(&self, voucher: i64, shards: u32) -> Result<(i64, Vec<i64>)> {
        let mut conn = self.redis.conn().await?;
        for fresh in [false, true] {
            let gen = self.take_gen(voucher, fresh).await?;
            let mut seqs = Vec::with_capacity(shards as usize);
            for k in 0..shards {
                let (ok, seq): (i64, i64) = self
                    .restore_script(voucher, k, shards, gen, "close", 0)
                    .invoke_async(&mut conn)
                    .await
                    .context("sale_restore.lua close")?;
                if ok != 1 {
                    if seq >= (gen + 1) * GEN {
                        bail!("a newer repair took shard {k} of sale {voucher} (at {seq}); this one ({gen}) stops");
                    }
                    // Written in this generation since its close: a new one.
                    break;
                }
                seqs.push(seq);
            }
            if seqs.len() == shards as usize {
                return Ok((gen, seqs));
            }
        }
        bail!("shards of sale {voucher} moved while it was being closed; this repair stops")
    }

    /// The generation of the repair under way: the unfinished one's (unless
    /// `fresh`), else the next; only while this process holds the lease (a
    /// repairer that lost it must not start a generation under the one that took
    /// over).
    async fn take_gen(&self, voucher: i64, fresh: bool) -> Result<i64> {
        let gen: Option<i64> = sqlx::query_scalar(
            "UPDATE sale_states
                SET gen = CASE WHEN repair_gen = gen AND NOT $4 THEN gen ELSE gen + 1 END,
                    repair_gen = CASE WHEN repair_gen = gen AND NOT $4 THEN gen ELSE gen + 1 END,
                    updated_at = now()
              WHERE namespace = $1 AND voucher_id = $2 AND repairer = $3 AND repair_until > clock_timestamp()
              RETURNING gen",
        )
        .bind(self.namespace())
        .bind(voucher)
        .bind(&self.me)
        .bind(fresh)
        .fetch_optional(&self.pg)
        .await
        .context("taking a sale's generation for its repair")?;
        match gen {
            Some(g) => Ok(g),
            None => bail!("the repair lease of sale {voucher} ran out before its generation; this repair stops"),
        }
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
                    repairs = s.repairs + $3::int, closed_since = NULL, repair_gen = NULL, updated_at = now()
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

    /// Drops the points recorded of the sale's shards before generation `gen`:
    /// moot now. (Best effort: a point left is held by every shard of a newer
    /// generation.)
    async fn forget_points_before(&self, voucher: i64, shards: u32, gen: i64) {
        let tags: Vec<String> = (0..shards)
            .map(|k| crate::keys::shard_tag(voucher, k, shards).to_string())
            .collect();
        let r = sqlx::query(
            "WITH a AS (DELETE FROM shard_points WHERE namespace = $1 AND tag = ANY($2) AND seq < $3)
             DELETE FROM shard_floors WHERE namespace = $1 AND tag = ANY($2) AND seq < $3",
        )
        .bind(self.namespace())
        .bind(&tags)
        .bind(gen * GEN)
        .execute(&self.pg)
        .await;
        if let Err(e) = r {
            tracing::debug!(voucher, error = %e, "dropping a repaired sale's older points failed");
        }
    }
}
