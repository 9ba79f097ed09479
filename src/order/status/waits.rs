//! A long poll's registration on the board.
use super::board::Board;
use std::sync::Arc;
use tokio::sync::Notify;

/// A long poll's registration (see [`Waiter::new`]).
pub struct Waiter {
    board: Arc<Board>,
    order: i64,
    notify: Arc<Notify>,
}

impl Waiter {
    /// Registers a long poll of `order` on `board`: it is woken by every
    /// announcement naming the order (and whenever the board is emptied) until it
    /// goes.
    pub fn new(board: &Arc<Board>, order: i64) -> Self {
        Self {
            notify: board.register(order),
            board: board.clone(),
            order,
        }
    }

    /// Until something that may change the order's answer happens (an
    /// announcement naming it, the board hearing again after a gap), `deadline`,
    /// or the process stopping. `armed` is this waiter's notification, enabled
    /// before the caller looked.
    pub async fn wait(
        &self,
        armed: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
        deadline: tokio::time::Instant,
    ) {
        tokio::select! {
            _ = armed => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = self.board.closing.cancelled() => {}
        }
    }

    /// The notification to arm before looking (see [`Waiter::wait`]).
    pub fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.board.unregister(self.order);
    }
}
