//! A witness, outside Postgres, of every counter range reserved ([`super::ranges`]):
//! so that a Postgres that goes back in time (an asynchronous standby promoted, a
//! point-in-time restore) cannot hand out again the order ids and business numbers
//! it reserved before and forgot.
//!
//! After Postgres reserves a range, `lua/counter_witness.lua` compares it with the
//! ranges this Redis saw reserved for the scope (a sorted set, kept three days: a
//! scope is a day's). Concurrent reservations arrive in any order, but never
//! overlap unless Postgres reserved the same values twice. An overlap means
//! Postgres went back: the range is not used; the scope's watermark in Postgres is
//! raised above every range seen, the reservation is made again, and the event is
//! an incident (`worker_incidents_total{kind="postgres_went_back"}`, an `INCIDENT`
//! log line). Values between are skipped, never repeated.
//!
//! The witness is a second memory, not a lock: a Redis that does not answer within
//! [`CHECK_TIMEOUT`] is passed over, and not asked again for [`SKIP_AFTER_FAILURE`]
//! (numbers need no Redis: a Redis frozen or gone costs a reservation at most
//! that timeout, once; a warning says the check was skipped). A Redis that went
//! back at the same moment as Postgres, or refuses writes (past its maxmemory),
//! remembers less. Scopes are not namespaced in Postgres, the witness is: two
//! namespaces sharing one database do not see each other's ranges.
use super::ranges::Range;
use crate::keys::Keys;
use crate::redis_conn::Redis;
use anyhow::{bail, Context, Result};
use redis::Script;
use sqlx::PgPool;
use std::sync::LazyLock;

static WITNESS: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/counter_witness.lua")));

/// How long a scope's witness is kept: a scope is a day's (order ids by UTC day,
/// numbers by the rule's local day).
const KEEP_SECS: u64 = 3 * 86_400;
/// How long a check may wait for Redis.
pub const CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(100);
/// How long checks are skipped after one failed.
pub const SKIP_AFTER_FAILURE: std::time::Duration = std::time::Duration::from_secs(5);

/// Where the witness lives.
pub struct Witness {
    redis: Redis,
    keys: Keys,
    /// Checks are skipped until then (a check failed).
    skip_until: std::sync::Mutex<Option<std::time::Instant>>,
    /// Counts the incidents.
    metrics: Option<std::sync::Arc<crate::metrics::Metrics>>,
}

/// What the witness said of a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Overlapping no range seen reserved: use it.
    New,
    /// Overlapping a range seen reserved before (Postgres went back); `high`: the
    /// highest value seen reserved.
    Before { high: u64 },
}

impl Witness {
    pub fn new(redis: Redis, keys: Keys, metrics: Option<std::sync::Arc<crate::metrics::Metrics>>) -> Self {
        Self {
            redis,
            keys,
            skip_until: std::sync::Mutex::new(None),
            metrics,
        }
    }

    /// Compares `range` of `scope` with the ranges Redis saw reserved, and
    /// records it if new. Redis unreachable: unchecked (New).
    pub async fn check(&self, scope: &str, range: Range) -> Seen {
        let now = std::time::Instant::now();
        if self
            .skip_until
            .lock()
            .expect("witness poisoned")
            .is_some_and(|until| now < until)
        {
            return Seen::New;
        }
        let checked = tokio::time::timeout(CHECK_TIMEOUT, self.remote(scope, range))
            .await
            .unwrap_or_else(|_| Err(anyhow::anyhow!("no answer within {CHECK_TIMEOUT:?}")));
        match checked {
            Ok(0) => Seen::New,
            Ok(high) => Seen::Before { high },
            Err(e) => {
                *self.skip_until.lock().expect("witness poisoned") = Some(now + SKIP_AFTER_FAILURE);
                tracing::warn!(
                    scope,
                    error = %format!("{e:#}"),
                    "the counter witness in Redis was not checked; skipped for {SKIP_AFTER_FAILURE:?}"
                );
                Seen::New
            }
        }
    }

    async fn remote(&self, scope: &str, range: Range) -> Result<u64> {
        let mut conn = self.redis.conn().await?;
        let seen: i64 = WITNESS
            .key(self.keys.counter_witness(scope))
            .arg(range.first)
            .arg(range.last)
            .arg(KEEP_SECS)
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

/// [`super::ranges::reserve`], checked by the witness: a range Postgres
/// reserved before (it went back in time) is not used; the scope's watermark is
/// raised above the witness and the values reserved again.
pub async fn reserve_witnessed(pg: &PgPool, witness: Option<&Witness>, scope: &str, size: u64) -> Result<Range> {
    let Some(witness) = witness else {
        return super::ranges::reserve(pg, scope, size).await;
    };
    for _ in 0..3 {
        let range = super::ranges::reserve(pg, scope, size).await?;
        match witness.check(scope, range).await {
            Seen::New => return Ok(range),
            Seen::Before { high } => {
                witness.went_back(scope, range, high);
                let high = i64::try_from(high).context("a witness beyond i64")?;
                sqlx::query(
                    "UPDATE counter_watermarks SET high = greatest(high, $2), updated_at = now() WHERE scope = $1",
                )
                .bind(scope)
                .bind(high)
                .execute(pg)
                .await
                .with_context(|| format!("raising counter {scope} above its witness"))?;
            }
        }
    }
    bail!("counter {scope}: Postgres keeps reserving values it reserved before")
}
