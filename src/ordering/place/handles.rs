//! Each thread's handle on an order placer's Redis, made once per thread and shared
//! by the orders that thread serves ([`OrderPlacer::on_this_thread`]).
use super::OrderPlacer;
use crate::ordering::refill_flights::RefillFlights;
use crate::redis_conn::Redis;
use std::sync::Arc;

thread_local! {
    /// Per order placer (known by its `refill_flights`, whose weak reference also tells that
    /// the placer is gone), this thread's Redis handle. Shared, not cloned, per order:
    /// a `Redis` clone copies its clients' connection details (strings).
    static HOT: std::cell::RefCell<Vec<(std::sync::Weak<RefillFlights>, Arc<Redis>)>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl OrderPlacer {
    /// This thread's handle on the order path's Redis (see [`Redis::on_this_thread`]),
    /// made on first use.
    pub(super) fn on_this_thread(&self) -> Arc<Redis> {
        HOT.with(|hot| {
            let mut hot = hot.borrow_mut();
            // A live weak reference to this placer's `refill_flights` is this placer: the
            // allocation cannot be reused while the reference exists.
            if let Some((_, r)) = hot
                .iter()
                .find(|(placer, _)| placer.as_ptr() == Arc::as_ptr(&self.refill_flights))
            {
                return r.clone();
            }
            hot.retain(|(placer, _)| placer.strong_count() > 0);
            let r = Arc::new(self.redis.on_this_thread());
            hot.push((Arc::downgrade(&self.refill_flights), r.clone()));
            r
        })
    }
}
