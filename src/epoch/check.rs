//! One check of the server: whether Postgres vouches for what Redis holds now (see
//! the module above).
use super::guard::EpochGuard;
use super::row::{read_row, EpochRow};
use super::{clock, durability};
use anyhow::{Context, Result};
use std::sync::Arc;

/// What one check found.
pub(super) struct Checked {
    /// Postgres and Redis agree.
    pub healthy: bool,
    /// The node's run id, or every master's of a cluster.
    pub run_id: Arc<str>,
    /// The epoch row, unless Redis went back within that epoch.
    pub row: Option<EpochRow>,
    /// The slots of the stock keys found missing (of the shards read).
    pub missing: Vec<u16>,
    /// Whether the marker names the row's epoch and the clock is not behind.
    pub marker_intact: bool,
    /// Whether the Redis clock is behind the highest value Postgres recorded.
    pub clock_behind: bool,
}

impl EpochGuard {
    /// Whether Postgres and Redis agree; the server's run id; the epoch row, unless
    /// Redis went back within that epoch (its clock is behind): then its counters,
    /// whose keys carry the epoch, went back too, and nothing may use that epoch.
    pub(super) async fn check(&self, every_shard: bool) -> Result<Checked> {
        // The node's run_id, or every master's of a cluster, as they are now.
        let run_id = self.redis.current_identity().await?;
        let mut conn = self.redis.conn().await?;
        // Postgres before Redis: the clock value read here was in Redis before the
        // pipeline below reads it (see `clock`).
        let row = read_row(&self.pg, self.namespace()).await?;
        let now = chrono::Utc::now();
        // The stock key of every live sale. The periodic check reads shard 0's of a
        // sharded sale, so that a sale's check costs the same whatever its shards: a
        // master that restarts empty or fails over changes the run ids above. A
        // shard's stock missing otherwise is met by the first order, move or read
        // that needs it, which answers "not loaded" and distrusts the server; the
        // check that distrust wakes reads every shard, so that the loss is repaired
        // rather than trusted again at once.
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
            .flat_map(|(v, shards)| {
                let read = if every_shard { shards } else { 1 };
                (0..read).map(move |k| (v, k, shards))
            })
            .collect();
        let mut pipe = redis::pipe();
        pipe.get(self.keys.epoch());
        clock::tick(&mut pipe, &self.keys.clock(), row.as_ref().map_or(0, |r| r.clock));
        for (v, k, shards) in &live {
            pipe.exists(self.keys.stock_at(*v, *k, *shards));
        }
        let reply: Vec<redis::Value> = pipe.query_async(&mut conn).await.context("reading the epoch marker")?;
        let marker: Option<i64> = redis::from_redis_value_ref(&reply[0]).ok().flatten();
        let tick = clock::read_tick(&reply[1])?;
        let missing: Vec<u16> = reply[2..]
            .iter()
            .zip(&live)
            .filter(|(v, _)| !redis::from_redis_value_ref::<bool>(v).unwrap_or(false))
            .map(|(_, (v, k, n))| crate::keys::slot(self.keys.stock_at(*v, *k, *n).as_bytes()))
            .collect();
        // During a repair that has not finished the marker still names the last
        // finished epoch: then it is intact if present.
        let marker_intact = row.as_ref().is_some_and(|r| {
            if r.repairing {
                marker.is_some()
            } else {
                marker == Some(r.epoch)
            }
        }) && tick.advanced;
        let healthy = row
            .as_ref()
            .is_some_and(|r| !r.repairing && *r.server == *run_id && marker == Some(r.epoch))
            && missing.is_empty()
            && tick.advanced;
        let went_back = row.as_ref().is_some_and(|r| !r.repairing && !tick.advanced);
        if let Some(r) = row.as_ref().filter(|_| went_back) {
            tracing::warn!(
                redis = tick.value,
                recorded = r.clock,
                epoch = r.epoch,
                "the Redis clock is behind the one Postgres recorded: Redis went back in time"
            );
        }
        if let Some(r) = row.as_ref().filter(|_| healthy) {
            clock::record(&self.pg, self.namespace(), r.epoch, tick.value).await?;
        }
        if self.durability.read().expect("durability poisoned").is_none() {
            let d = durability(&mut conn).await;
            if !d.safe {
                tracing::warn!(aof = %d.aof, replicas = d.replicas, at_risk = %d.at_risk, "Redis durability");
            } else {
                tracing::info!(aof = %d.aof, "Redis durability: acknowledged orders survive a Redis crash");
            }
            *self.durability.write().expect("durability poisoned") = Some(d);
        }
        Ok(Checked {
            healthy,
            run_id,
            row: row.filter(|_| !went_back),
            missing,
            marker_intact,
            clock_behind: !tick.advanced,
        })
    }
}
