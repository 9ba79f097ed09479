//! Each thread's handle on an order desk's Redis, made once per thread and shared
//! by the orders that thread serves ([`OrderDesk::on_this_thread`]).
use super::OrderDesk;
use crate::order::movers::Movers;
use crate::redis_conn::Redis;
use std::sync::Arc;

thread_local! {
    /// Per order desk (known by its `movers`, whose weak reference also tells that
    /// the desk is gone), this thread's Redis handle. Shared, not cloned, per order:
    /// a `Redis` clone copies its clients' connection details (strings).
    static HOT: std::cell::RefCell<Vec<(std::sync::Weak<Movers>, Arc<Redis>)>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl OrderDesk {
    /// This thread's handle on the order path's Redis (see [`Redis::on_this_thread`]),
    /// made on first use.
    pub(super) fn on_this_thread(&self) -> Arc<Redis> {
        HOT.with(|hot| {
            let mut hot = hot.borrow_mut();
            // A live weak reference to this desk's `movers` is this desk: the
            // allocation cannot be reused while the reference exists.
            if let Some((_, r)) = hot.iter().find(|(desk, _)| desk.as_ptr() == Arc::as_ptr(&self.movers)) {
                return r.clone();
            }
            hot.retain(|(desk, _)| desk.strong_count() > 0);
            let r = Arc::new(self.redis.on_this_thread());
            hot.push((Arc::downgrade(&self.movers), r.clone()));
            r
        })
    }
}
