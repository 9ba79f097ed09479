//! The metrics watched beside the order flow: the repairs of sales, the incidents
//! alerts fire on, and serving (HTTP latency, Redis memory); each area's registered
//! by its own constructor.
use super::reg::{reg, Reg};
use prometheus::{
    exponential_buckets, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
};

/// What the repairs of sales record: the sales closed now, the repairs completed,
/// how long sales were closed.
pub(super) struct Repair {
    pub(super) redis_repairing: IntGauge,
    pub(super) redis_repairs: IntCounter,
    pub(super) repair_closed_seconds: Histogram,
    pub(super) sale_closed_seconds: prometheus::GaugeVec,
}

impl Repair {
    /// This area's metrics, registered in `r`.
    pub(super) fn registered(r: &Reg) -> Self {
        Self {
            redis_repairing: reg(
                r,
                IntGauge::new(
                    "redis_repairing",
                    "Sales this process has closed (a shard of theirs lost or behind, a repair under way): orders get 503",
                )
                .unwrap(),
            ),
            redis_repairs: reg(
                r,
                IntCounter::new(
                    "redis_repairs_total",
                    "Sales repairs after Redis went back in time or lost state",
                )
                .unwrap(),
            ),
            repair_closed_seconds: reg(
                r,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "redis_repair_closed_seconds",
                        "How long each repaired sale was closed (from its closing to selling again)",
                    )
                    .buckets(exponential_buckets(0.005, 2.0, 16).unwrap()),
                )
                .unwrap(),
            ),
            sale_closed_seconds: reg(
                r,
                prometheus::GaugeVec::new(
                    Opts::new(
                        "sale_closed_seconds",
                        "Per running sale, how long repairs have kept it closed in all (the closure under way included)",
                    ),
                    &["voucher"],
                )
                .unwrap(),
            ),
        }
    }
}

/// What the alerts watch besides: incidents by kind, unbalanced sales, poison
/// messages.
pub(super) struct Incidents {
    pub(super) worker_incidents: IntCounterVec,
    pub(super) sales_unbalanced: IntGauge,
    pub(super) worker_poison: IntCounter,
}

impl Incidents {
    /// This area's metrics, registered in `r`.
    pub(super) fn registered(r: &Reg) -> Self {
        Self {
            worker_incidents: reg(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "worker_incidents_total",
                        "Incidents met while persisting, relaying or repairing orders, by kind: id_collision, \
                         number_collision, failed, dead_lettered, late_conflict, unreadable_outbox_entry, \
                         repair_two_orders, repair_over_stock, postgres_went_back",
                    ),
                    &["kind"],
                )
                .unwrap(),
            ),
            sales_unbalanced: reg(
                r,
                IntGauge::new(
                    "sales_unbalanced",
                    "Running flash sales whose books (Redis, in flight, Postgres) did not balance in two consecutive audits",
                )
                .unwrap(),
            ),
            worker_poison: reg(
                r,
                IntCounter::new(
                    "worker_poison_messages_total",
                    "Messages that were not order batches (dead-lettered)",
                )
                .unwrap(),
            ),
        }
    }
}

/// What serving records: the HTTP latency by route, and the fullest Redis master's
/// memory from the readiness checks.
pub(super) struct Serving {
    pub(super) http_seconds: HistogramVec,
    pub(super) redis_memory_used_ratio: prometheus::Gauge,
}

impl Serving {
    /// This area's metrics, registered in `r`.
    pub(super) fn registered(r: &Reg, latency: Vec<f64>) -> Self {
        Self {
            http_seconds: reg(
                r,
                HistogramVec::new(
                    HistogramOpts::new("http_request_seconds", "HTTP latency by route").buckets(latency),
                    &["method", "route", "status"],
                )
                .unwrap(),
            ),
            redis_memory_used_ratio: reg(
                r,
                prometheus::Gauge::new(
                    "redis_memory_used_ratio",
                    "The fullest Redis master's used memory over its maxmemory (0 while no master has a limit)",
                )
                .unwrap(),
            ),
        }
    }
}
