//! A long poll's registration on the board.
use super::board::{Board, PING_EVERY};
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

    /// Until something that may change the order's answer happens, `deadline`,
    /// or the process stopping. While the board is not live, at most a
    /// [`PING_EVERY`] (then the caller looks again). `armed` is this waiter's
    /// notification, enabled before the caller looked.
    pub async fn wait(
        &self,
        armed: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
        deadline: tokio::time::Instant,
    ) {
        let board = &self.board;
        let blind = async {
            if board.is_live() {
                std::future::pending::<()>().await
            } else {
                tokio::time::sleep(PING_EVERY).await
            }
        };
        tokio::select! {
            _ = armed => {}
            _ = blind => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = board.closing.cancelled() => {}
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
