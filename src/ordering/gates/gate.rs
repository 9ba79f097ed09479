//! One shard's gate: the orders waiting at it and whether a call is in flight,
//! and what answers them when a drain stops before its end.
use super::script::{Ask, Reservation};
use crate::recovery::history::ShardHistory;
use redis::RedisError;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

pub(super) type Answer = anyhow::Result<Reservation>;

/// The orders at a gate, each with where its answer goes.
pub(super) type Waiting = Vec<(Ask, oneshot::Sender<Answer>)>;

/// The orders waiting for one shard, and whether a call for it is in flight.
pub(super) struct Gate {
    pub(super) voucher: i64,
    pub(super) tag: Arc<str>,
    pub(super) keys: [String; 6],
    /// This process's points of the shard's history (and its log of the orders
    /// acknowledged here).
    pub(super) history: Arc<ShardHistory>,
    pub(super) state: Mutex<(bool, Waiting)>,
}

/// The answer of an order whose call ended without one (its task was stopped, e.g.
/// at shutdown): the order may exist; a transient error, so 503 and a safe retry.
pub(super) fn lost_answer() -> anyhow::Error {
    anyhow::Error::new(RedisError::from((
        redis::ErrorKind::Io,
        "the reservation's call ended without an answer; the order may exist",
    )))
}

/// Opens the gate and answers every order waiting at it (with [`lost_answer`])
/// when a drain stops before its end (its task stopped, a panic), unless disarmed:
/// no order waits forever for a call nobody will make.
pub(super) struct Opener<'a> {
    pub(super) gate: &'a Gate,
    pub(super) armed: bool,
}

impl Drop for Opener<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let waiting = {
            let mut state = self.gate.state.lock().unwrap_or_else(|p| p.into_inner());
            state.0 = false;
            std::mem::take(&mut state.1)
        };
        for (_, tx) in waiting {
            let _ = tx.send(Err(lost_answer()));
        }
    }
}
