//! What this process knows about the Redis server it may sell from: the run id it
//! verified and repaired, and for which epoch (see the module above).
use std::sync::{Arc, RwLock};
use tokio::sync::Notify;

/// What this process knows about the Redis server it may sell from.
#[derive(Default)]
pub struct Identity {
    state: RwLock<Option<Verified>>,
    /// Woken when a connection met a server other than the verified one, or a caller
    /// saw a sign of lost state: the epoch guard checks at once.
    pub suspect: Notify,
}

/// The server `run_id` whose state Postgres vouches for, at `epoch`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    pub run_id: Arc<str>,
    pub epoch: i64,
    /// The epoch is recorded for this server, but sales are still being repaired:
    /// counters (whose keys carry the epoch) may be used, the sales in `scope`
    /// may not.
    pub repairing: bool,
    /// While `repairing`: the sales under repair, sorted (`None`: every sale). The
    /// others keep selling (a repair touches only the sales on the masters that
    /// changed, see `crate::epoch`).
    pub scope: Option<Arc<[i64]>>,
}

impl Verified {
    /// Trusted at `epoch`, nothing under repair.
    pub fn settled(run_id: Arc<str>, epoch: i64) -> Self {
        Self {
            run_id,
            epoch,
            repairing: false,
            scope: None,
        }
    }

    /// Whether `voucher`'s sale may be written (sold, returned, moved, relayed).
    pub fn sells(&self, voucher: i64) -> bool {
        !self.repairing || self.scope.as_ref().is_some_and(|s| s.binary_search(&voucher).is_err())
    }
}

impl Identity {
    pub fn get(&self) -> Option<Verified> {
        self.state.read().expect("identity poisoned").clone()
    }

    pub fn set(&self, v: Option<Verified>) {
        *self.state.write().expect("identity poisoned") = v;
    }

    /// Forget the verification (something is wrong) and wake the guard.
    pub fn distrust(&self) {
        self.set(None);
        self.suspect.notify_one();
    }
}
