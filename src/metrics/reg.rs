//! The registry being built: every metric registered once, its names recorded.
use prometheus::Registry;

/// The registry, and the names registered in it (vectors without children too).
pub(super) struct Reg {
    pub(super) registry: Registry,
    pub(super) names: std::sync::Mutex<Vec<String>>,
}

/// Registers one metric and records its names; returns the metric.
pub(super) fn reg<T: prometheus::core::Collector + Clone + 'static>(r: &Reg, c: T) -> T {
    let names = c.desc().into_iter().map(|d| format!("seckill_{}", d.fq_name));
    r.names.lock().expect("names").extend(names);
    r.registry
        .register(Box::new(c.clone()))
        .expect("metric names are unique");
    c
}
