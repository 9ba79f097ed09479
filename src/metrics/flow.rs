//! The metrics of the order flow, top to bottom: the order path, the outbox and
//! its relay, the worker; each area's registered by its own constructor.
use super::reg::{reg, Reg};
use prometheus::{exponential_buckets, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts};

/// What the order path records: requests by outcome, the order script's latency and
/// the orders each call carries.
pub(super) struct OrderPath {
    pub(super) order_requests: IntCounterVec,
    pub(super) reserve_seconds: Histogram,
    pub(super) reserve_batch: Histogram,
}

impl OrderPath {
    /// This area's metrics, registered in `r`.
    pub(super) fn registered(r: &Reg, latency: &[f64]) -> Self {
        Self {
            order_requests: reg(
                r,
                IntCounterVec::new(
                    Opts::new("order_requests_total", "Order requests by outcome"),
                    &["outcome"],
                )
                .unwrap(),
            ),
            reserve_seconds: reg(
                r,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "reserve_lua_seconds",
                        "Latency of the order script (EVALSHA round trip)",
                    )
                    .buckets(latency.to_vec()),
                )
                .unwrap(),
            ),
            reserve_batch: reg(
                r,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "reserve_lua_batch_orders",
                        "Orders carried by one call of the order script (those that gathered at the shard while the previous call was in flight)",
                    )
                    .buckets(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]),
                )
                .unwrap(),
            ),
        }
    }
}

/// What the outbox and its relay record: the format written, the backlog, the lag
/// to a confirmed publish, what was published and confirmed.
pub(super) struct Relay {
    pub(super) outbox_format_written: IntGauge,
    pub(super) outbox_backlog: IntGauge,
    pub(super) relay_lag_seconds: Histogram,
    pub(super) relay_published: IntCounter,
    pub(super) relay_confirms: IntCounterVec,
}

impl Relay {
    /// This area's metrics, registered in `r`.
    pub(super) fn registered(r: &Reg, latency: &[f64]) -> Self {
        Self {
            outbox_format_written: reg(
                r,
                IntGauge::new(
                    "outbox_format_written",
                    "The outbox entry format this process writes now: the recorded decision, at most what it reads",
                )
                .unwrap(),
            ),
            outbox_backlog: reg(
                r,
                IntGauge::new(
                    "outbox_backlog",
                    "Entries in the outbox streams not yet relayed (at scrape)",
                )
                .unwrap(),
            ),
            relay_lag_seconds: reg(
                r,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "relay_lag_seconds",
                        "Time from an order's admission to its confirmed publish",
                    )
                    .buckets(latency.to_vec()),
                )
                .unwrap(),
            ),
            relay_published: reg(
                r,
                IntCounter::new(
                    "relay_published_orders_total",
                    "Orders published to RabbitMQ and confirmed",
                )
                .unwrap(),
            ),
            relay_confirms: reg(
                r,
                IntCounterVec::new(
                    Opts::new("relay_confirms_total", "Publisher confirms by result"),
                    &["result"],
                )
                .unwrap(),
            ),
        }
    }
}

/// What the worker records: batch sizes, the latency of a batch's transaction, the
/// orders written by result.
pub(super) struct Worker {
    pub(super) worker_batch_orders: Histogram,
    pub(super) worker_persist_seconds: Histogram,
    pub(super) orders_persisted: IntCounterVec,
}

impl Worker {
    /// This area's metrics, registered in `r`.
    pub(super) fn registered(r: &Reg, latency: &[f64]) -> Self {
        Self {
            worker_batch_orders: reg(
                r,
                Histogram::with_opts(
                    HistogramOpts::new("worker_batch_orders", "Orders per persisted batch")
                        .buckets(exponential_buckets(1.0, 2.0, 15).unwrap()),
                )
                .unwrap(),
            ),
            worker_persist_seconds: reg(
                r,
                Histogram::with_opts(
                    HistogramOpts::new("worker_persist_seconds", "Latency of one batch transaction")
                        .buckets(latency.to_vec()),
                )
                .unwrap(),
            ),
            orders_persisted: reg(
                r,
                IntCounterVec::new(
                    Opts::new("orders_persisted_total", "Orders written by the worker, by result"),
                    &["result"],
                )
                .unwrap(),
            ),
        }
    }
}
