//! Keeps `seckill_sales_unbalanced` current: audits the running sales on a timer and
//! counts those unbalanced in two rounds in a row.
//!
//! A sharded sale's Redis books take two `MULTI`s per shard at least, so an idle
//! one is not read every round: once an audit found it balanced with nothing in
//! flight (no order between Redis and Postgres, nothing in its outboxes, no unit in
//! transit), later rounds read only its Postgres books, and audit it again when
//! those changed. Everything that changes a sale's Redis books outside moves
//! (which keep them balanced) reaches Postgres: an admitted order within the
//! pipeline's delay (until then it is in flight, balanced), a cancellation or a
//! top-up first. What it does not see is Redis itself losing or gaining units
//! behind the service's back on an idle sharded sale: the order that meets a lost
//! shard, or `GET …/audit` (always a full read) tell those.
use super::books::{books, postgres_books, Lookup, PostgresBooks};
use crate::clock::Clock;
use crate::keys::Keys;
use crate::metrics::Metrics;
use crate::redis_conn::Redis;
use crate::sales::cache::VoucherCache;
use sqlx::PgPool;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Sales unbalanced in the previous audit round, to count those unbalanced twice.
#[derive(Debug, Default)]
pub struct Streak {
    previous: HashSet<i64>,
}

impl Streak {
    /// Records one round's unbalanced sales; returns those unbalanced in this round
    /// and the one before.
    pub fn observe(&mut self, unbalanced: HashSet<i64>) -> HashSet<i64> {
        let twice = unbalanced.intersection(&self.previous).copied().collect();
        self.previous = unbalanced;
        twice
    }

    /// A round that could not audit: the next two rounds start afresh.
    pub fn reset(&mut self) {
        self.previous.clear();
    }
}

/// Audits the running flash sales every `every` and keeps
/// `seckill_sales_unbalanced` current.
pub struct Watch {
    pub pg: PgPool,
    pub redis: Redis,
    pub keys: Keys,
    pub cache: Arc<VoucherCache>,
    pub clock: Clock,
    pub metrics: Arc<Metrics>,
    pub every: Duration,
    /// The sales this process has closed are not audited.
    pub recovery: Arc<crate::recovery::Recovery>,
}

impl Watch {
    pub async fn run(self, stop: CancellationToken) {
        let mut streak = Streak::default();
        let mut counted = HashSet::new();
        let mut quiet = HashMap::new();
        let mut tick = tokio::time::interval(self.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let twice = match self.round(&mut quiet).await {
                Some(unbalanced) => streak.observe(unbalanced),
                None => {
                    streak.reset();
                    HashSet::new()
                }
            };
            for v in twice.difference(&counted) {
                tracing::warn!(
                    voucher_id = v,
                    "a running sale's books did not balance in two audits in a row"
                );
            }
            self.metrics.sales_unbalanced.set(twice.len() as i64);
            counted = twice;
        }
    }

    /// The running sales whose books do not balance now (a sale closed in this
    /// process, being repaired, is not audited: its books are being rewritten).
    /// `quiet`: the sharded sales last found balanced with nothing in flight, with
    /// their Postgres books then.
    async fn round(&self, quiet: &mut HashMap<i64, (i64, PostgresBooks)>) -> Option<HashSet<i64>> {
        let now = self.clock.now();
        let running: Vec<(i64, u32)> = self
            .cache
            .flash_sales()
            .iter()
            .filter(|e| {
                e.voucher
                    .flash
                    .as_ref()
                    .is_some_and(|f| f.begin_at <= now && now < f.end_at)
                    && !self.recovery.is_closed(e.voucher.id)
            })
            .map(|e| (e.voucher.id, e.voucher.flash.as_ref().map_or(1, |f| f.shards())))
            .collect();
        quiet.retain(|v, _| running.iter().any(|(r, _)| r == v));
        let mut unbalanced = HashSet::new();
        for (v, shards) in running {
            if shards > 1 {
                if let (Some(then), Ok(Ok(now))) = (quiet.get(&v), postgres_books(&self.pg, v).await) {
                    if *then == now {
                        continue;
                    }
                }
            }
            quiet.remove(&v);
            match books(&self.pg, &self.redis, &self.keys, v).await {
                Ok(Lookup::Found(a)) if !a.balanced => {
                    unbalanced.insert(v);
                }
                Ok(Lookup::Found(a)) => {
                    let idle = a.in_flight.orders == 0 && a.redis.outbox == 0 && a.redis.units_in_transit == 0;
                    if shards > 1 && idle {
                        quiet.insert(v, (a.stock, a.postgres));
                    }
                }
                Ok(_) => {}
                // Not counted: an audit that could not read the books found nothing.
                Err(e) => tracing::warn!(voucher_id = v, error = %format!("{e:#}"), "audit of a running sale failed"),
            }
        }
        Some(unbalanced)
    }
}
