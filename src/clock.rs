//! The one source of "now". Production reads the system clock; tests set it.
use chrono::{DateTime, Utc};
use std::sync::{Arc, Mutex};

/// A clock that is either the system clock or a manually set instant.
#[derive(Clone, Default)]
pub struct Clock {
    manual: Option<Arc<Mutex<DateTime<Utc>>>>,
}

impl Clock {
    /// The system clock.
    pub fn system() -> Self {
        Self { manual: None }
    }

    /// A clock that stays at `at` until [`Clock::set`] moves it.
    pub fn manual(at: DateTime<Utc>) -> Self {
        Self {
            manual: Some(Arc::new(Mutex::new(at))),
        }
    }

    pub fn now(&self) -> DateTime<Utc> {
        match &self.manual {
            Some(at) => *at.lock().expect("clock mutex poisoned"),
            None => Utc::now(),
        }
    }

    /// Moves a manual clock; a system clock ignores it.
    pub fn set(&self, to: DateTime<Utc>) {
        if let Some(at) = &self.manual {
            *at.lock().expect("clock mutex poisoned") = to;
        }
    }
}
