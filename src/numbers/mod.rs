//! Daily business numbers: prefix + local date + a zero-padded counter that
//! restarts at local midnight of the rule's time zone, never issued twice.
//!
//! Each call reserves its numbers in Postgres ([`ranges`]), in a scope that names
//! the rule, the tenant and the local date: a new day is a new scope (nothing
//! expires or resets, a known way to issue a number twice), and the date in the
//! number and in the scope come from the same instant. One statement per call,
//! whatever Redis is going through.
pub mod body;
pub mod id_worker;
pub mod ranges;
pub mod rule;
pub mod witness;

pub use rule::{Rule, RuleError};

use crate::clock::Clock;
use anyhow::{Context, Result};
use sqlx::PgPool;

/// The rule orders take their `order_no` from.
pub const ORDER_RULE: &str = "order";
/// The tenant order numbers are issued under.
pub const ORDER_TENANT: i64 = 0;
#[derive(Clone)]
pub struct Sequences {
    pg: PgPool,
    clock: Clock,
    /// Checks every range against Postgres going back in time (none: unchecked).
    witness: Option<std::sync::Arc<witness::Witness>>,
}

impl Sequences {
    pub fn new(pg: PgPool, clock: Clock) -> Self {
        Self {
            pg,
            clock,
            witness: None,
        }
    }

    /// Records a rule (a new one, or new values for one of that name).
    pub async fn set_rule(&self, rule: &rule::Rule) -> Result<(), sqlx::Error> {
        rule::upsert(&self.pg, rule).await
    }

    /// The same, each range checked by `witness`.
    pub fn witnessed(mut self, witness: std::sync::Arc<witness::Witness>) -> Self {
        self.witness = Some(witness);
        self
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
        let range = witness::reserve_witnessed(&self.pg, self.witness.as_deref(), &scope, count).await?;
        let date = rule.format_date(day);
        Ok((range.first..=range.last).map(|n| rule.number(&date, n)).collect())
    }
}
