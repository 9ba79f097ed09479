//! Prometheus metrics, one registry per application instance (`GET /metrics`).
//!
//! The order path records its outcome and the Lua latency; the relay its batches,
//! confirms and lag; the worker its batch sizes, persist latency and results; a
//! middleware the HTTP latency by route pattern and method, whose labels the code
//! bounds (see [`crate::http::admission`]). The outbox backlog is read from Redis
//! by a background task ([`crate::http::health`]), never per scrape.
use prometheus::{
    exponential_buckets, Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};

pub struct Metrics {
    registry: Registry,
    /// The page as last rendered for `GET /metrics` (see [`Metrics::page`]).
    page: std::sync::Mutex<Option<Page>>,
    /// How often the page is rendered at most, in ms (`SECKILL_METRICS_RENDER_MS`).
    render_every_ms: std::sync::atomic::AtomicU64,
    /// Order requests by outcome: accepted, sold_out, already_ordered, not_started,
    /// ended, paused, rate_limited, unavailable, not_found, not_a_flash_sale.
    pub order_requests: IntCounterVec,
    pub reserve_seconds: Histogram,
    /// Orders per call of the order script (coalesced per shard).
    pub reserve_batch: Histogram,
    pub outbox_backlog: IntGauge,
    /// The outbox format this process writes now (`crate::outbox::format`).
    pub outbox_format_written: IntGauge,
    pub relay_lag_seconds: Histogram,
    pub relay_published: IntCounter,
    /// Publisher confirms by result: ack, nack, returned, error.
    pub relay_confirms: IntCounterVec,
    pub worker_batch_orders: Histogram,
    pub worker_persist_seconds: Histogram,
    /// Orders by result: created, duplicate, failed.
    pub orders_persisted: IntCounterVec,
    /// Messages that were not order batches, dead-lettered at once.
    pub worker_poison: IntCounter,
    pub http_seconds: HistogramVec,
    /// The sales this process has closed now (a shard lost or behind, a repair
    /// under way): their orders answer 503.
    pub redis_repairing: IntGauge,
    /// Sale repairs this process completed.
    pub redis_repairs: IntCounter,
    /// How long each repaired sale was closed: from the first process closing it
    /// to the repair reopening it (one observation per repair).
    pub repair_closed_seconds: Histogram,
    /// Per running sale (and only those: the label set stays bounded), how long
    /// repairs have kept it closed in all, the closure under way included.
    pub sale_closed_seconds: prometheus::GaugeVec,
    /// Incidents met while persisting orders: id_collision (an id another order
    /// already had), number_collision (an order_no already taken), dead_lettered
    /// (an order message taken from the dead-letter queue: its delivery limit ran
    /// out), late_conflict (an order a relay read before a repair that could not
    /// count it, whose unit or shopper was sold again: stored `failed` by the relay).
    pub worker_incidents: IntCounterVec,
    /// Running flash sales whose books did not balance in two consecutive audits
    /// (see [`crate::voucher::audit`]).
    pub sales_unbalanced: IntGauge,
    /// The fullest Redis master's used memory over its `maxmemory` (0 to 1; not
    /// set while no master has a limit), from the readiness checks.
    pub redis_memory_used_ratio: prometheus::Gauge,
    /// The names of every metric this registers, with the `seckill_` prefix (a
    /// vector without children is not on the page yet: the alert rules are checked
    /// against this list, `deploy/prometheus/alerts.yml`).
    pub names: Vec<String>,
}

/// How often `GET /metrics` renders the page at most, by default.
pub const RENDER_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The metrics page as rendered once: the text and its gzip.
#[derive(Clone)]
pub struct Page {
    made: std::time::Instant,
    pub text: bytes::Bytes,
    pub gzip: bytes::Bytes,
}

/// Every kind of `worker_incidents_total`.
pub const INCIDENT_KINDS: [&str; 9] = [
    "id_collision",
    "number_collision",
    "failed",
    "dead_lettered",
    "late_conflict",
    "unreadable_outbox_entry",
    "repair_two_orders",
    "repair_over_stock",
    "postgres_went_back",
];

/// The registry, and the names registered in it (vectors without children too).
struct Reg {
    registry: Registry,
    names: std::sync::Mutex<Vec<String>>,
}

fn reg<T: prometheus::core::Collector + Clone + 'static>(r: &Reg, c: T) -> T {
    let names = c.desc().into_iter().map(|d| format!("seckill_{}", d.fq_name));
    r.names.lock().expect("names").extend(names);
    r.registry
        .register(Box::new(c.clone()))
        .expect("metric names are unique");
    c
}

impl Metrics {
    pub fn new() -> Self {
        let m = Self::registered();
        // Every kind and result at 0 from the start: a counter whose series appeared
        // at its first increment would show `increase()` no change, and its first
        // incident would raise no alert (deploy/prometheus/alerts.yml).
        for kind in INCIDENT_KINDS {
            m.worker_incidents.with_label_values(&[kind]);
        }
        for result in ["ack", "error"] {
            m.relay_confirms.with_label_values(&[result]);
        }
        m
    }

    fn registered() -> Self {
        let r = Reg {
            registry: Registry::new_custom(Some("seckill".into()), None).expect("valid prefix"),
            names: std::sync::Mutex::new(Vec::new()),
        };
        let latency = exponential_buckets(0.0001, 2.0, 16).expect("buckets");
        Self {
            order_requests: reg(
                &r,
                IntCounterVec::new(
                    Opts::new("order_requests_total", "Order requests by outcome"),
                    &["outcome"],
                )
                .unwrap(),
            ),
            reserve_seconds: reg(
                &r,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "reserve_lua_seconds",
                        "Latency of the order script (EVALSHA round trip)",
                    )
                    .buckets(latency.clone()),
                )
                .unwrap(),
            ),
            reserve_batch: reg(
                &r,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "reserve_lua_batch_orders",
                        "Orders carried by one call of the order script (those that gathered at the shard while the previous call was in flight)",
                    )
                    .buckets(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]),
                )
                .unwrap(),
            ),
            outbox_format_written: reg(
                &r,
                IntGauge::new(
                    "outbox_format_written",
                    "The outbox entry format this process writes now: the recorded decision, at most what it reads",
                )
                .unwrap(),
            ),
            outbox_backlog: reg(
                &r,
                IntGauge::new(
                    "outbox_backlog",
                    "Entries in the outbox streams not yet relayed (at scrape)",
                )
                .unwrap(),
            ),
            relay_lag_seconds: reg(
                &r,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "relay_lag_seconds",
                        "Time from an order's admission to its confirmed publish",
                    )
                    .buckets(latency.clone()),
                )
                .unwrap(),
            ),
            relay_published: reg(
                &r,
                IntCounter::new(
                    "relay_published_orders_total",
                    "Orders published to RabbitMQ and confirmed",
                )
                .unwrap(),
            ),
            relay_confirms: reg(
                &r,
                IntCounterVec::new(
                    Opts::new("relay_confirms_total", "Publisher confirms by result"),
                    &["result"],
                )
                .unwrap(),
            ),
            worker_batch_orders: reg(
                &r,
                Histogram::with_opts(
                    HistogramOpts::new("worker_batch_orders", "Orders per persisted batch")
                        .buckets(exponential_buckets(1.0, 2.0, 15).unwrap()),
                )
                .unwrap(),
            ),
            worker_persist_seconds: reg(
                &r,
                Histogram::with_opts(
                    HistogramOpts::new("worker_persist_seconds", "Latency of one batch transaction")
                        .buckets(latency.clone()),
                )
                .unwrap(),
            ),
            orders_persisted: reg(
                &r,
                IntCounterVec::new(
                    Opts::new("orders_persisted_total", "Orders written by the worker, by result"),
                    &["result"],
                )
                .unwrap(),
            ),
            redis_repairing: reg(
                &r,
                IntGauge::new(
                    "redis_repairing",
                    "Sales this process has closed (a shard of theirs lost or behind, a repair under way): orders get 503",
                )
                .unwrap(),
            ),
            redis_repairs: reg(
                &r,
                IntCounter::new(
                    "redis_repairs_total",
                    "Sales repairs after Redis went back in time or lost state",
                )
                .unwrap(),
            ),
            repair_closed_seconds: reg(
                &r,
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
                &r,
                prometheus::GaugeVec::new(
                    Opts::new(
                        "sale_closed_seconds",
                        "Per running sale, how long repairs have kept it closed in all (the closure under way included)",
                    ),
                    &["voucher"],
                )
                .unwrap(),
            ),
            worker_incidents: reg(
                &r,
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
                &r,
                IntGauge::new(
                    "sales_unbalanced",
                    "Running flash sales whose books (Redis, in flight, Postgres) did not balance in two consecutive audits",
                )
                .unwrap(),
            ),
            worker_poison: reg(
                &r,
                IntCounter::new(
                    "worker_poison_messages_total",
                    "Messages that were not order batches (dead-lettered)",
                )
                .unwrap(),
            ),
            http_seconds: reg(
                &r,
                HistogramVec::new(
                    HistogramOpts::new("http_request_seconds", "HTTP latency by route").buckets(latency),
                    &["method", "route", "status"],
                )
                .unwrap(),
            ),
            redis_memory_used_ratio: reg(
                &r,
                prometheus::Gauge::new(
                    "redis_memory_used_ratio",
                    "The fullest Redis master's used memory over its maxmemory (0 while no master has a limit)",
                )
                .unwrap(),
            ),
            names: {
                let mut names = std::mem::take(&mut *r.names.lock().expect("names"));
                names.sort();
                names
            },
            registry: r.registry,
            page: std::sync::Mutex::new(None),
            render_every_ms: std::sync::atomic::AtomicU64::new(RENDER_EVERY.as_millis() as u64),
        }
    }

    pub fn order(&self, outcome: &str) {
        self.order_requests.with_label_values(&[outcome]).inc();
    }

    /// How often [`Metrics::page`] renders at most (default [`RENDER_EVERY`]; 0:
    /// every request).
    pub fn set_render_every(&self, every: std::time::Duration) {
        self.render_every_ms
            .store(every.as_millis() as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// The page `GET /metrics` serves: rendered at most once per
    /// `SECKILL_METRICS_RENDER_MS` (default [`RENDER_EVERY`]: a scrape flood costs
    /// one render a second, however many ask), with its gzip made once too.
    /// Scrapers see values at most that old.
    pub fn page(&self) -> Page {
        let every = std::time::Duration::from_millis(self.render_every_ms.load(std::sync::atomic::Ordering::Relaxed));
        let mut page = self.page.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = page.as_ref().filter(|p| p.made.elapsed() < every) {
            return p.clone();
        }
        let text = bytes::Bytes::from(self.render());
        let gzip = {
            use std::io::Write;
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(&text).expect("gzip into memory cannot fail");
            bytes::Bytes::from(gz.finish().expect("gzip into memory cannot fail"))
        };
        let fresh = Page {
            made: std::time::Instant::now(),
            text,
            gzip,
        };
        *page = Some(fresh.clone());
        fresh
    }

    /// The text exposition format, rendered now.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .expect("text encoding cannot fail");
        String::from_utf8(buf).expect("the text format is UTF-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The method label: the methods HTTP defines, and `other` for anything a client
/// made up, so that clients cannot grow the label set.
pub fn method_label(m: &actix_web::http::Method) -> &'static str {
    use actix_web::http::Method;
    match *m {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        Method::TRACE => "TRACE",
        Method::CONNECT => "CONNECT",
        _ => "other",
    }
}

/// Whether a path is the order endpoint's (`/api/v1/vouchers/<digits>/orders`),
/// without running the router: the admission middleware counts the order requests
/// it refuses before routing.
pub fn is_order_path(path: &str) -> bool {
    path.strip_prefix("/api/v1/vouchers/")
        .and_then(|rest| rest.strip_suffix("/orders"))
        .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_bounded_by_the_code() {
        use actix_web::http::Method;
        assert_eq!(method_label(&Method::POST), "POST");
        assert_eq!(method_label(&Method::from_bytes(b"M17").unwrap()), "other");
        assert!(is_order_path("/api/v1/vouchers/123/orders"));
        assert!(!is_order_path("/api/v1/vouchers/12x/orders"));
        assert!(!is_order_path("/api/v1/vouchers//orders"));
        assert!(!is_order_path("/api/v1/vouchers/1/orders/mine"));
    }

    #[test]
    fn rendering_shows_the_counters() {
        let m = Metrics::new();
        m.order("accepted");
        assert!(m
            .render()
            .contains("seckill_order_requests_total{outcome=\"accepted\"} 1"));
    }
}
