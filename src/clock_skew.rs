//! How far this process's clock is from Postgres's, and whether it may sell.
//!
//! The order handler checks the sale window against this process's clock (the hot
//! path never asks Postgres). A clock that is off would sell before the sale starts
//! or after it ends. So every process measures its offset from Postgres's clock at
//! start and then every [`MEASURE_EVERY`]: it reads `clock_timestamp()` a few times
//! on one connection and keeps the sample with the shortest round trip, taking the
//! local time at the round trip's midpoint (offset = local − Postgres, within ± half
//! the round trip). While |offset| + half the round trip exceeds the tolerance
//! (`SECKILL_MAX_CLOCK_SKEW_MS`, default 2 s; 0 turns the check off), orders get 503
//! `unavailable` with Retry-After, and the other instances sell.
//!
//! The bound: an instance sells at most the tolerance outside the window as
//! Postgres's clock has it, except right after its clock jumps (NTP stepping it,
//! an operator), until the next measurement, at most `MEASURE_EVERY` later.
//! Postgres is needed only to measure: while it cannot be reached the last
//! measurement stands (clocks drift by milliseconds a minute, not seconds), and
//! if the first one fails the process sells until one succeeds (with a warning).
use crate::clock::Clock;
use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How often the offset is measured.
pub const MEASURE_EVERY: Duration = Duration::from_secs(2);
/// Retry-After of the 503 while the clock is off (the next measurement may clear it).
pub const RETRY_AFTER_SECS: u64 = MEASURE_EVERY.as_secs();
/// Round trips per measurement (the shortest is kept).
const SAMPLES: usize = 3;
const UNMEASURED: i64 = i64::MIN;

/// One measurement: this clock minus Postgres's, and how far it may be wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offset {
    pub offset: chrono::Duration,
    /// Half the round trip.
    pub uncertainty: Duration,
}

impl Offset {
    /// Whether the clock may be further than `tolerance` from Postgres's.
    pub fn beyond(&self, tolerance: Duration) -> bool {
        let off = self.offset.abs().to_std().unwrap_or(Duration::MAX);
        off.saturating_add(self.uncertainty) > tolerance
    }
}

pub struct ClockSkew {
    /// None: not checked.
    tolerance: Option<Duration>,
    offset_us: AtomicI64,
    uncertainty_us: AtomicI64,
    refusing: AtomicBool,
}

impl ClockSkew {
    pub fn new(tolerance: Option<Duration>) -> Self {
        Self {
            tolerance,
            offset_us: AtomicI64::new(UNMEASURED),
            uncertainty_us: AtomicI64::new(0),
            refusing: AtomicBool::new(false),
        }
    }

    /// Whether orders must be refused: the last measurement put this clock beyond
    /// the tolerance. One atomic load.
    pub fn refusing(&self) -> bool {
        self.refusing.load(Ordering::Relaxed)
    }

    /// The last measurement, if any.
    pub fn last(&self) -> Option<Offset> {
        let us = self.offset_us.load(Ordering::Relaxed);
        (us != UNMEASURED).then(|| Offset {
            offset: chrono::Duration::microseconds(us),
            uncertainty: Duration::from_micros(self.uncertainty_us.load(Ordering::Relaxed).max(0) as u64),
        })
    }

    /// Measures once and records the verdict (logging when it changes).
    pub async fn check(&self, pg: &PgPool, clock: &Clock) -> Result<Offset> {
        let m = measure(pg, clock).await?;
        self.offset_us
            .store(m.offset.num_microseconds().unwrap_or(i64::MAX), Ordering::Relaxed);
        self.uncertainty_us.store(
            m.uncertainty.as_micros().min(i64::MAX as u128) as i64,
            Ordering::Relaxed,
        );
        let refuse = self.tolerance.is_some_and(|t| m.beyond(t));
        if self.refusing.swap(refuse, Ordering::Relaxed) != refuse {
            let offset_ms = m.offset.num_milliseconds();
            let tolerance_ms = self.tolerance.map_or(0, |t| t.as_millis());
            if refuse {
                tracing::error!(
                    offset_ms,
                    uncertainty_ms = m.uncertainty.as_millis(),
                    tolerance_ms,
                    "this process's clock is too far from Postgres's: orders get 503 until it is right"
                );
            } else {
                tracing::warn!(
                    offset_ms,
                    tolerance_ms,
                    "the clock is within the tolerance again: selling"
                );
            }
        }
        Ok(m)
    }

    /// Measures every [`MEASURE_EVERY`] until `stop`.
    pub async fn run(self: Arc<Self>, pg: PgPool, clock: Clock, stop: CancellationToken) {
        let mut failures = 0u32;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(MEASURE_EVERY) => {}
            }
            match self.check(&pg, &clock).await {
                Ok(_) => failures = 0,
                Err(e) => {
                    failures += 1;
                    if failures <= 3 || failures.is_multiple_of(30) {
                        tracing::warn!(error = %format!("{e:#}"), "could not measure the clock's offset; the last measurement stands");
                    }
                }
            }
        }
    }
}

/// This clock's offset from Postgres's: the sample with the shortest round trip.
pub async fn measure(pg: &PgPool, clock: &Clock) -> Result<Offset> {
    let mut conn = pg.acquire().await.context("a connection to measure the clock")?;
    let mut best: Option<Offset> = None;
    for _ in 0..SAMPLES {
        let sent = clock.now();
        let started = Instant::now();
        let theirs: DateTime<Utc> = sqlx::query_scalar("SELECT clock_timestamp()")
            .fetch_one(&mut *conn)
            .await
            .context("reading Postgres's clock")?;
        let half = started.elapsed() / 2;
        let sample = Offset {
            offset: sent + chrono::Duration::from_std(half)? - theirs,
            uncertainty: half,
        };
        if best.is_none_or(|b| sample.uncertainty < b.uncertainty) {
            best = Some(sample);
        }
    }
    Ok(best.expect("at least one sample"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(offset_ms: i64, uncertainty_ms: u64) -> Offset {
        Offset {
            offset: chrono::Duration::milliseconds(offset_ms),
            uncertainty: Duration::from_millis(uncertainty_ms),
        }
    }

    #[test]
    fn beyond_the_tolerance_either_way_counting_the_uncertainty() {
        let t = Duration::from_secs(2);
        assert!(!at(0, 0).beyond(t));
        assert!(!at(1_999, 1).beyond(t));
        assert!(!at(-2_000, 0).beyond(t));
        assert!(at(2_001, 0).beyond(t));
        assert!(at(-2_001, 0).beyond(t));
        assert!(at(1_900, 101).beyond(t), "may be 2.001 s off");
        assert!(at(300_000, 0).beyond(t));
    }

    #[test]
    fn unmeasured_it_sells() {
        let s = ClockSkew::new(Some(Duration::from_secs(2)));
        assert!(!s.refusing());
        assert_eq!(s.last(), None);
    }
}
