//! Daily business numbers: prefix + local date + a zero-padded counter that
//! restarts at local midnight of the rule's time zone, never issued twice.
//!
//! The counter is a [`counter::DurableCounter`] whose scope names the rule, the
//! tenant and the local date: a new day is a new key (no expiry racing with an
//! increment, a known way to issue a number twice), and the date in the number and
//! in the key come from the same instant.
pub mod body;
pub mod counter;
pub mod rule;

pub use rule::{Rule, RuleError};

use crate::clock::Clock;
use anyhow::{Context, Result};
use chrono::{Days, TimeZone};
use counter::DurableCounter;
use sqlx::PgPool;

/// The rule orders take their `order_no` from.
pub const ORDER_RULE: &str = "order";
/// The tenant order numbers are issued under.
pub const ORDER_TENANT: i64 = 0;
/// The fewest numbers one reservation in Postgres takes for a sequence counter.
const DURABLE_STEP: u64 = 1000;
/// A call for many numbers at once (the worker numbers a whole batch) reserves
/// this many calls' worth: one Postgres write per so many batches, and batches
/// running side by side mostly find the numbers already reserved. Numbers skip
/// (never repeat) where a reservation goes unused: after a loss of the counter, or
/// when a caller at the ceiling stalls longer than the others wait for it.
const CALLS_AHEAD: u64 = 8;

#[derive(Clone)]
pub struct Sequences {
    counter: DurableCounter,
    pg: PgPool,
    clock: Clock,
}

impl Sequences {
    pub fn new(counter: DurableCounter, pg: PgPool, clock: Clock) -> Self {
        Self { counter, pg, clock }
    }

    /// Creates the default `order` rule if it does not exist yet.
    pub async fn ensure_order_rule(&self, tz: chrono_tz::Tz) -> Result<()> {
        let rule = Rule::parse_parts(ORDER_RULE, "SK", "yyyyMMdd", 4, tz.name()).context("the default order rule")?;
        rule::insert_if_missing(&self.pg, &rule)
            .await
            .context("creating the default order rule")
    }

    /// `count` consecutive numbers of rule `name` for `tenant`; `None` if no such rule.
    pub async fn next(&self, name: &str, tenant: i64, count: u64) -> Result<Option<Vec<String>>> {
        let Some(rule) = rule::get(&self.pg, name).await.context("reading a sequence rule")? else {
            return Ok(None);
        };
        self.next_for(&rule, tenant, count).await.map(Some)
    }

    pub async fn next_for(&self, rule: &Rule, tenant: i64, count: u64) -> Result<Vec<String>> {
        let now = self.clock.now();
        let local = now.with_timezone(&rule.tz);
        let day = local.date_naive();
        let scope = format!("seq:{}:{}:{}", rule.name, tenant, day.format("%Y%m%d"));
        // The key outlives its local day by one more day, then expires.
        let next_midnight = day
            .checked_add_days(Days::new(2))
            .and_then(|d| rule.tz.from_local_datetime(&d.and_hms_opt(0, 0, 0)?).earliest())
            .map(|t| (t.timestamp() - now.timestamp()).max(60) as u64)
            .unwrap_or(3 * 86_400);
        let range = self
            .counter
            .take(
                &scope,
                count,
                next_midnight,
                DURABLE_STEP.max(count.saturating_mul(CALLS_AHEAD)),
            )
            .await?;
        let date = rule.format_date(day);
        Ok((range.first..=range.last).map(|n| rule.number(&date, n)).collect())
    }
}
