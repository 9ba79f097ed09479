//! What readiness last found, held in memory for `GET /health/ready`: the report
//! [`crate::app::readiness`]'s background task writes once a second and the handler
//! reads (a file of its own so that the application's state can hold it without
//! depending on the task, which reads that state).
use crate::redis_conn::MasterFacts;
use chrono::{DateTime, Utc};
use std::sync::{Arc, RwLock};

/// The last result of the dependency checks.
#[derive(Clone, Debug)]
pub struct Report {
    /// Each dependency and whether it answered: postgres, redis, rabbitmq.
    pub checks: Vec<(&'static str, bool)>,
    /// Replicas and eviction as every master reported them (`None`: not answered).
    pub masters: Option<MasterFacts>,
    /// When the checks ran (served with the answer, so a reader sees its age).
    pub checked_at: DateTime<Utc>,
}

impl Report {
    pub fn down(&self) -> Vec<&'static str> {
        self.checks.iter().filter(|(_, up)| !up).map(|(n, _)| *n).collect()
    }
}

/// The report the handler serves; `None` until the first checks ran (the
/// application runs them once before it listens).
#[derive(Default)]
pub struct Readiness(RwLock<Option<Arc<Report>>>);

impl Readiness {
    pub fn get(&self) -> Option<Arc<Report>> {
        self.0.read().expect("readiness poisoned").clone()
    }

    pub(crate) fn set(&self, r: Report) {
        *self.0.write().expect("readiness poisoned") = Some(Arc::new(r));
    }
}
