//! Prometheus metrics, one registry per application instance (`GET /metrics`).
//!
//! The order path records its outcome and the Lua latency; the relay its batches,
//! confirms and lag; the worker its batch sizes, persist latency and results; a
//! middleware the HTTP latency by route pattern and method, whose labels the code
//! bounds (see [`crate::http::rate_limits`]). The outbox backlog is read from Redis
//! by a background task ([`crate::http::health`]), never per scrape.
use prometheus::{
    exponential_buckets, Encoder, Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge, Registry, TextEncoder,
};

mod flow;
mod reg;
#[cfg(test)]
mod tests;
mod watch;

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
    /// The outbox format this process writes now (`crate::ordering::outbox::format`).
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
    /// Incidents: an acknowledged order stored under a fresh id or number, stored
    /// `failed`, dead-lettered, read before a repair and sold again, left unread,
    /// counted twice or beyond the stock by a repair, or a counter's range reused
    /// (each kind in [`INCIDENT_KINDS`], which the help text names).
    pub worker_incidents: IntCounterVec,
    /// Running flash sales whose books did not balance in two consecutive audits
    /// (see [`crate::reports`]).
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

    /// Every metric registered, area by area (the order flow's, then those watched
    /// beside it), and their names sorted; no series of a vector yet.
    fn registered() -> Self {
        let r = reg::Reg {
            registry: Registry::new_custom(Some("seckill".into()), None).expect("valid prefix"),
            names: std::sync::Mutex::new(Vec::new()),
        };
        let latency = exponential_buckets(0.0001, 2.0, 16).expect("buckets");
        let order = flow::OrderPath::registered(&r, &latency);
        let relay = flow::Relay::registered(&r, &latency);
        let worker = flow::Worker::registered(&r, &latency);
        let repair = watch::Repair::registered(&r);
        let incidents = watch::Incidents::registered(&r);
        let serving = watch::Serving::registered(&r, latency);
        Self {
            order_requests: order.order_requests,
            reserve_seconds: order.reserve_seconds,
            reserve_batch: order.reserve_batch,
            outbox_format_written: relay.outbox_format_written,
            outbox_backlog: relay.outbox_backlog,
            relay_lag_seconds: relay.relay_lag_seconds,
            relay_published: relay.relay_published,
            relay_confirms: relay.relay_confirms,
            worker_batch_orders: worker.worker_batch_orders,
            worker_persist_seconds: worker.worker_persist_seconds,
            orders_persisted: worker.orders_persisted,
            redis_repairing: repair.redis_repairing,
            redis_repairs: repair.redis_repairs,
            repair_closed_seconds: repair.repair_closed_seconds,
            sale_closed_seconds: repair.sale_closed_seconds,
            worker_incidents: incidents.worker_incidents,
            sales_unbalanced: incidents.sales_unbalanced,
            worker_poison: incidents.worker_poison,
            http_seconds: serving.http_seconds,
            redis_memory_used_ratio: serving.redis_memory_used_ratio,
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
