//! The sales this process treats as closed: a script found one of their shards
//! lost or behind, or Postgres says a repair of them is under way. Orders of a
//! closed sale are answered 503 without a Redis call. Only availability rests on
//! this set: the scripts themselves refuse a shard that is closed (its stock key
//! is gone) or behind, whatever any process believes.
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::RwLock;
use std::time::Instant;

#[derive(Default)]
pub struct Closed {
    /// Sale -> when this process closed it.
    sales: RwLock<HashMap<i64, Instant>>,
    /// How many: the order path reads the map only while some sale is closed.
    count: AtomicUsize,
}

impl Closed {
    /// Whether `voucher`'s sale is closed in this process.
    pub fn is_closed(&self, voucher: i64) -> bool {
        self.count.load(Ordering::Acquire) > 0 && self.sales.read().expect("closed poisoned").contains_key(&voucher)
    }

    /// Closes `voucher`'s sale; true if it was open.
    pub fn close(&self, voucher: i64) -> bool {
        let mut sales = self.sales.write().expect("closed poisoned");
        let new = sales.insert(voucher, Instant::now()).is_none();
        if !new {
            // Keep the first closure's time.
            return false;
        }
        self.count.store(sales.len(), Ordering::Release);
        true
    }

    /// Opens `voucher`'s sale; how long this process had it closed, if it did.
    pub fn open(&self, voucher: i64) -> Option<std::time::Duration> {
        let mut sales = self.sales.write().expect("closed poisoned");
        let since = sales.remove(&voucher)?;
        self.count.store(sales.len(), Ordering::Release);
        Some(since.elapsed())
    }

    /// The sales closed now.
    pub fn list(&self) -> Vec<i64> {
        let mut v: Vec<i64> = self.sales.read().expect("closed poisoned").keys().copied().collect();
        v.sort_unstable();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sale_closes_once_and_opens() {
        let c = Closed::default();
        assert!(!c.is_closed(1));
        assert!(c.close(1));
        assert!(!c.close(1));
        assert!(c.is_closed(1) && !c.is_closed(2));
        assert_eq!(c.list(), vec![1]);
        assert!(c.open(1).is_some());
        assert!(c.open(1).is_none());
        assert!(!c.is_closed(1));
    }
}
