//! A long poll's registration on the board.
use super::board::Board;
use std::sync::Arc;
use tokio::sync::Notify;

/// How often a long poll looks again while the board does not hear every
/// announcement (a change is then seen at most this late).
pub const DEAF_LOOK_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

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
    /// announcement naming it, the board hearing again after a gap; while it does
    /// not hear, [`DEAF_LOOK_EVERY`]), `deadline`, or the process stopping. `armed` is this waiter's notification, enabled
    /// before the caller looked.
    pub async fn wait(
        &self,
        armed: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
        deadline: tokio::time::Instant,
    ) {
        // While the board does not hear every announcement, the poll looks again
        // now and then (its lookups take turns, see `Board::looks`).
        let deaf = async {
            if self.board.is_live() {
                std::future::pending::<()>().await
            } else {
                tokio::time::sleep(DEAF_LOOK_EVERY).await
            }
        };
        tokio::select! {
            _ = armed => {}
            _ = deaf => {}
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
