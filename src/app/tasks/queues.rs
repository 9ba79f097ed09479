//! The queue frontiers' tick: every running queue moves at its rate whether or
//! not anyone polls this instance (the advance counts from the last move, whoever
//! made it).
use crate::admit::Mode;
use crate::http::state::AppState;
use chrono::Utc;

/// Advances every queue sale running now (begun, not ended) that this instance
/// knows, as far as its rate allows; what fails is tried on the next tick.
pub(super) async fn advance_running_queues(state: &AppState) {
    let now = Utc::now();
    for entry in state.sales.flash_sales() {
        let Some(flash) = entry.voucher.flash.as_ref() else {
            continue;
        };
        if flash.admission != Mode::Queue || now < flash.begin_at {
            continue;
        }
        let id = entry.voucher.typed_id();
        if now >= flash.end_at {
            // Ended: its frontier is of no more use to this instance.
            state.admit.frontiers.forget(id.get());
            continue;
        }
        let (shards, turn) = (flash.shards(), flash.turn_secs.unwrap_or(300));
        // Read when the frontier may move, after the live orders are counted.
        let units = || async { Ok(state.sales.remaining(id, shards).await?.unwrap_or(0)) };
        if let Err(e) = state.admit.frontier(id, flash.begin_at, i64::from(turn), units).await {
            tracing::debug!(voucher_id = id.get(), error = ?e, "queue not advanced this tick");
        }
    }
}
