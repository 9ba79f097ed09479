//! The one source of "now". Production reads the system clock; tests set it.
use chrono::{DateTime, Utc};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

/// A clock that is the system clock, the system clock shifted by an offset (an
/// instance whose clock is off), or a manually set instant.
#[derive(Clone, Default)]
pub struct Clock {
    manual: Option<Arc<Mutex<DateTime<Utc>>>>,
    /// Milliseconds added to the system clock.
    offset_ms: Option<Arc<AtomicI64>>,
}

impl Clock {
    /// The system clock.
    pub fn system() -> Self {
        Self::default()
    }

    /// A clock that stays at `at` until [`Clock::set`] moves it.
    pub fn manual(at: DateTime<Utc>) -> Self {
        Self {
            manual: Some(Arc::new(Mutex::new(at))),
            offset_ms: None,
        }
    }

    /// The system clock running `by` ahead (behind, if negative), until
    /// [`Clock::set_offset`] changes it: an instance whose clock is off.
    pub fn skewed(by: chrono::Duration) -> Self {
        Self {
            manual: None,
            offset_ms: Some(Arc::new(AtomicI64::new(by.num_milliseconds()))),
        }
    }

    pub fn now(&self) -> DateTime<Utc> {
        if let Some(at) = &self.manual {
            return *at.lock().expect("clock mutex poisoned");
        }
        let now = Utc::now();
        match &self.offset_ms {
            Some(ms) => now + chrono::Duration::milliseconds(ms.load(Ordering::Relaxed)),
            None => now,
        }
    }

    /// [`Clock::now`] in whole seconds since the Unix epoch (0 before it): the time
    /// of admission tokens, queue tickets and proof-of-work challenges.
    pub fn unix_secs(&self) -> u64 {
        self.now().timestamp().max(0) as u64
    }

    /// Moves a manual clock; other clocks ignore it.
    pub fn set(&self, to: DateTime<Utc>) {
        if let Some(at) = &self.manual {
            *at.lock().expect("clock mutex poisoned") = to;
        }
    }

    /// Changes a skewed clock's offset; other clocks ignore it.
    pub fn set_offset(&self, by: chrono::Duration) {
        if let Some(ms) = &self.offset_ms {
            ms.store(by.num_milliseconds(), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skewed_clock_runs_with_the_system_clock_at_its_offset() {
        let c = Clock::skewed(chrono::Duration::minutes(-5));
        let skewed = c.now();
        let d = Utc::now() - skewed;
        assert!(d >= chrono::Duration::minutes(5) && d < chrono::Duration::minutes(5) + chrono::Duration::seconds(1));
        c.set_offset(chrono::Duration::zero());
        assert!((Utc::now() - c.now()).num_seconds().abs() < 1);
        Clock::system().set_offset(chrono::Duration::minutes(1)); // ignored
        assert!((Utc::now() - Clock::system().now()).num_seconds().abs() < 1);
    }
}
