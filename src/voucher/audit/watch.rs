//! Keeps `seckill_sales_unbalanced` current: audits the running sales on a timer and
//! counts those unbalanced in two rounds in a row.
use super::*;

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
}

impl Watch {
    pub async fn run(self, stop: CancellationToken) {
        let mut streak = Streak::default();
        let mut counted = HashSet::new();
        let mut tick = tokio::time::interval(self.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let twice = match self.round().await {
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

    /// The running sales whose books do not balance now; None if this round cannot
    /// tell (Redis is not verified: its sales are being repaired).
    async fn round(&self) -> Option<HashSet<i64>> {
        match self.redis.verified().await {
            Ok(Some(_)) => {}
            _ => return None,
        }
        let now = self.clock.now();
        let running: Vec<i64> = self
            .cache
            .flash_sales()
            .iter()
            .filter(|e| {
                e.voucher
                    .flash
                    .as_ref()
                    .is_some_and(|f| f.begin_at <= now && now < f.end_at)
            })
            .map(|e| e.voucher.id)
            .collect();
        let mut unbalanced = HashSet::new();
        for v in running {
            match books(&self.pg, &self.redis, &self.keys, v).await {
                Ok(Lookup::Found(a)) if !a.balanced => {
                    unbalanced.insert(v);
                }
                Ok(_) => {}
                // Not counted: an audit that could not read the books found nothing.
                Err(e) => tracing::warn!(voucher_id = v, error = %format!("{e:#}"), "audit of a running sale failed"),
            }
        }
        Some(unbalanced)
    }
}
