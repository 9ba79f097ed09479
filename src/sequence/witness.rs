//! A witness, outside Postgres, of every counter range reserved ([`super::ranges`]):
//! so that a Postgres that goes back in time (an asynchronous standby promoted, a
//! point-in-time restore) cannot hand out again the order ids and business numbers
//! it reserved before and forgot.
//!
//! After Postgres reserves a range, `lua/counter_witness.lua` compares it with the
//! highest value this Redis saw reserved for the scope. A range at or below it
//! means Postgres went back: the range is not used; the scope's watermark in
//! Postgres is raised above the witness, the reservation is made again, and the
//! event is an incident (`worker_incidents_total{kind="postgres_went_back"}`, an
//! `INCIDENT` log line). Values between the two are skipped, never repeated.
//!
//! The witness is a second memory, not a lock: a Redis that cannot be reached is
//! passed over (numbers need no Redis; a warning says the check was skipped), and
//! a Redis that went back at the same moment as Postgres remembers less. The
//! processes' own memory of what they reserved backs it up for their scopes
//! ([`Witness::check`] compares with it too).
use super::ranges::Range;
use crate::keys::Keys;
use crate::redis_conn::Redis;
use anyhow::{Context, Result};
use redis::Script;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

static WITNESS: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/counter_witness.lua")));

/// Where the witness lives, and what this process reserved itself.
pub struct Witness {
    redis: Redis,
    keys: Keys,
    /// The highest value this process reserved, per scope.
    mine: Mutex<HashMap<String, u64>>,
    /// Counts the incidents.
    metrics: Option<std::sync::Arc<crate::metrics::Metrics>>,
}

/// What the witness said of a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Above everything seen reserved: use it.
    New,
    /// At or below `high`, seen reserved before: Postgres went back.
    Before { high: u64 },
}

impl Witness {
    pub fn new(redis: Redis, keys: Keys, metrics: Option<std::sync::Arc<crate::metrics::Metrics>>) -> Self {
        Self {
            redis,
            keys,
            mine: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    /// Compares `range` of `scope` with what this process and Redis saw reserved,
    /// and records it if new. Redis unreachable: this process's memory alone.
    pub async fn check(&self, scope: &str, range: Range) -> Seen {
        let local = self
            .mine
            .lock()
            .expect("witness poisoned")
            .get(scope)
            .copied()
            .unwrap_or(0);
        let remote = match self.remote(scope, range).await {
            Ok(high) => high,
            Err(e) => {
                tracing::warn!(scope, error = %format!("{e:#}"), "the counter witness in Redis was not checked");
                0
            }
        };
        let high = local.max(remote);
        if high >= range.first {
            return Seen::Before { high };
        }
        let mut mine = self.mine.lock().expect("witness poisoned");
        let entry = mine.entry(scope.to_owned()).or_insert(0);
        *entry = (*entry).max(range.last);
        Seen::New
    }

    async fn remote(&self, scope: &str, range: Range) -> Result<u64> {
        let mut conn = self.redis.conn().await?;
        let seen: i64 = WITNESS
            .key(self.keys.counter_witness(scope))
            .arg(range.first)
            .arg(range.last)
            .invoke_async(&mut conn)
            .await
            .context("counter_witness.lua")?;
        Ok(seen.max(0) as u64)
    }

    /// Says that Postgres went back for `scope` (an incident).
    pub fn went_back(&self, scope: &str, range: Range, high: u64) {
        tracing::error!(
            scope,
            reserved_first = range.first,
            reserved_last = range.last,
            witnessed = high,
            "INCIDENT postgres_went_back: Postgres reserved a counter range it had reserved before; the values up \
             to the witness are skipped"
        );
        if let Some(m) = &self.metrics {
            m.worker_incidents.with_label_values(&["postgres_went_back"]).inc();
        }
    }
}
