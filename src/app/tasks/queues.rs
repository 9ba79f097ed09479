//! The queue frontiers' tick: every running queue moves at its rate whether or
//! not anyone polls this instance (the advance counts from the last move, whoever
//! made it).
use crate::admission::Mode;
use crate::http::state::AppState;

/// Advances every queue sale running now (begun, not ended) that this instance
/// knows, as far as its rate allows; what fails is tried on the next tick.
pub(super) async fn advance_running_queues(state: &AppState) {
    let now = state.clock.now();
    for entry in state.sales.flash_sales() {
        let Some(flash) = entry.voucher.flash.as_ref() else {
            continue;
        };
        if flash.admission != Mode::Queue || now < flash.begin_at {
            continue;
        }
        if now >= flash.end_at {
            // Ended: its frontier is of no more use to this instance.
            state.admit.frontiers.forget(entry.voucher.id);
            continue;
        }
        if let Err(e) = crate::http::waiting::frontier_of(state, &entry.voucher, flash).await {
            tracing::debug!(voucher_id = entry.voucher.id, error = ?e, "queue not advanced this tick");
        }
    }
}
