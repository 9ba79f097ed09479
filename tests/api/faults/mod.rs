//! The fault suite. Each fault is injected while a flash crowd's requests are in
//! flight (once a quarter of them are answered, the rest still going out):
//! - the service process killed with -9 and started again;
//! - RabbitMQ stopped and started again (a node of the test's own), and, on the
//!   shared broker, this deployment's connections cut;
//! - Postgres crashed (`pg_ctl -m immediate`) and started again (a cluster of the
//!   test's own), and, on the shared server, this database refusing connections;
//! - Redis killed with -9 and restarted with AOF (`appendfsync always`, a server of
//!   the test's own), and, on the shared server, the sale's keys deleted.
//!
//! The crowd (`crowd.rs`) holds its second half back until the fault has landed, and
//! fails unless, at the instant the fault lands ([`crowd::Landing::lands`], called
//! by each fault right before the step that lands it), requests were in flight
//! (sent, not answered) and acknowledged orders were not yet in Postgres: a fault
//! that lands on an idle system proves nothing. A fault test that is not shaped
//! like a crowd (a fault that lasts while the test probes, a stream it measures)
//! runs a [`crowd::Steady`] stream of new shoppers instead, whose `lands` makes
//! the same check. New fault tests use one or the other. After a crowd's fault,
//! new shoppers buy what is left, and orders must have been accepted after
//! the fault (a relay or worker that never reconnects leaves them unpersisted).
//! Then: drain, and check that every acknowledged order is persisted (none lost;
//! when Redis loses the outbox, none but the orders that were in it), none is in
//! flight, the whole stock sold exactly once, Postgres's stock matches, the sale's
//! audit balances and the worker met no incident (a reissued id or number, a late
//! conflict: the schema's unique indexes cannot show them). Each scenario prints
//! its counts. Servers of the test's own
//! ([`crate::fixtures`]) sit beside the shared ones on free ports of this machine,
//! so that other test runs sharing the servers are not disturbed; the two that run
//! RabbitMQ and PostgreSQL as their own users need root and are `#[ignore]`d unless
//! the test command runs as root (as CI does). Cutting the shared broker's
//! connections uses the local `rabbitmqctl`.
pub mod crowd;

use crate::fixtures::{require_root, spawn_binary, OwnPostgres, OwnRabbit, OwnRedis};
use crate::helpers::*;
use crowd::{after_the_fault, crowd, settle, settle_allowing, settle_on, Tally};
use reqwest::StatusCode;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

mod kills_and_outages;
mod partitions;
mod postgres_crash;
mod postgres_failover;
mod rabbit_cluster;
mod redis_minority;

/// After [`settle`]: prints the fault's answers and how long `app` reports the
/// sale closed (`seckill_sale_closed_seconds`), fails on any 5xx but 503, and
/// returns that closure in seconds.
pub async fn closure(scenario: &str, app: &TestApp, voucher: i64, tally: &Tally) -> f64 {
    let closed = app
        .metric(&format!("seckill_sale_closed_seconds{{voucher=\"{voucher}\"}}"))
        .await;
    println!(
        "fault {scenario}: answers {:?}; sale closed {closed:.1} s",
        tally.statuses
    );
    let errors = tally.statuses.iter().filter(|(s, _)| **s >= 500 && **s != 503).count();
    assert_eq!(errors, 0, "{scenario}: no 5xx but 503: {:?}", tally.statuses);
    closed
}

/// [`closure`], and the sale neither closed nor answered 503 at all.
pub async fn never_closed(scenario: &str, app: &TestApp, voucher: i64, tally: &Tally) {
    let closed = closure(scenario, app, voucher, tally).await;
    assert_eq!(closed, 0.0, "{scenario}: the sale was closed");
    assert_eq!(
        tally.statuses.get(&503),
        None,
        "{scenario}: the sale answered 503: {:?}",
        tally.statuses
    );
}
