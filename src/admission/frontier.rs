//! [`PerSale`]: a value per sale as this instance last computed it, so that a
//! request costs no query: at most one computation per sale per refresh in a
//! process (single flight), and the requests meanwhile read its answer. Each
//! queue's frontier ([`Frontiers`], refreshed every [`REFRESH`]), a raffle's
//! public summary.
use super::advance::Frontier;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How old a cached frontier may be before a poll advances the queue again.
pub const REFRESH: Duration = Duration::from_millis(250);

struct Slot<T> {
    last: Mutex<Option<(Instant, T)>>,
    /// Single flight: one computation at a time per sale in this process.
    running: tokio::sync::Mutex<()>,
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Self {
            last: Mutex::new(None),
            running: tokio::sync::Mutex::new(()),
        }
    }
}

/// Cached values, per sale.
pub struct PerSale<T> {
    map: Mutex<HashMap<i64, Arc<Slot<T>>>>,
}

impl<T> Default for PerSale<T> {
    fn default() -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
        }
    }
}

/// The cached frontiers, per sale.
pub type Frontiers = PerSale<Frontier>;

impl<T: Clone> PerSale<T> {
    fn slot(&self, voucher: i64) -> Arc<Slot<T>> {
        self.map
            .lock()
            .expect("frontiers poisoned")
            .entry(voucher)
            .or_default()
            .clone()
    }

    fn fresh(slot: &Slot<T>, max_age: Duration) -> Option<T> {
        let last = slot.last.lock().expect("frontier poisoned");
        last.as_ref()
            .filter(|(at, _)| at.elapsed() < max_age)
            .map(|(_, f)| f.clone())
    }

    /// The value of `voucher`, no older than `max_age`: cached, or from
    /// `advance` (one at a time; the callers waiting meanwhile take its answer).
    pub async fn get<F, Fut>(&self, voucher: i64, max_age: Duration, advance: F) -> anyhow::Result<T>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = anyhow::Result<T>>,
    {
        let slot = self.slot(voucher);
        if let Some(f) = Self::fresh(&slot, max_age) {
            return Ok(f);
        }
        let _running = slot.running.lock().await;
        if let Some(f) = Self::fresh(&slot, max_age) {
            return Ok(f);
        }
        let f = advance().await?;
        *slot.last.lock().expect("frontier poisoned") = Some((Instant::now(), f.clone()));
        Ok(f)
    }

    /// Forgets `voucher`'s value (a queue's rate changed): the next call computes.
    pub fn forget(&self, voucher: i64) {
        self.map.lock().expect("frontiers poisoned").remove(&voucher);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn frontier(admitted: i64) -> Frontier {
        Frontier {
            admitted,
            places: 10,
            length: 10,
            admit_rate: 1,
            sealed: true,
            held: false,
            paused: false,
        }
    }

    #[tokio::test]
    async fn polls_within_the_refresh_take_one_advance() {
        let f = Frontiers::default();
        let calls = AtomicUsize::new(0);
        for _ in 0..5 {
            let got = f
                .get(1, Duration::from_secs(60), || async {
                    Ok(frontier(calls.fetch_add(1, Ordering::SeqCst) as i64))
                })
                .await
                .unwrap();
            assert_eq!(got.admitted, 0);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // Zero age: every poll advances.
        f.get(1, Duration::ZERO, || async { Ok(frontier(7)) }).await.unwrap();
        assert_eq!(
            f.get(1, Duration::from_secs(60), || async { Ok(frontier(9)) })
                .await
                .unwrap()
                .admitted,
            7
        );
        f.forget(1);
        assert_eq!(
            f.get(1, Duration::from_secs(60), || async { Ok(frontier(9)) })
                .await
                .unwrap()
                .admitted,
            9
        );
    }
}
