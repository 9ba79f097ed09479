//! The entries of an outbox a relay cannot read (a newer format, or not written
//! by `reserve.lua`): counted and logged once, and parked so that the relay's
//! re-reads of its own pending entries reach the readable ones behind them.
use super::{Relay, PARKED};
use std::collections::HashMap;

impl Relay {
    /// An outbox entry this relay cannot read, left pending: the first time this
    /// process meets it, counted (`worker_incidents_total{kind="unreadable_outbox_entry"}`)
    /// and logged as an incident.
    pub(super) fn unreadable_met(&self, stream: &str, id: &str) {
        let first = self
            .memory
            .unreadable
            .lock()
            .expect("unreadable poisoned")
            .insert((stream.to_owned(), id.to_owned()));
        if first {
            self.metrics
                .worker_incidents
                .with_label_values(&["unreadable_outbox_entry"])
                .inc();
            tracing::error!(
                stream = %stream,
                id = %id,
                "INCIDENT: an outbox entry this relay cannot read (a newer format, or not written by \
                 reserve.lua) is left pending, parked, never acknowledged: a relay that reads it claims it \
                 after the claim timeout"
            );
        }
    }

    /// Hands entries this relay cannot read to the consumer [`PARKED`] (their
    /// idle time starts again), out of this consumer's pending list: its re-reads of
    /// its own pending entries (which start at the lowest id) would otherwise meet
    /// them first every time, and never reach the readable entries behind them.
    /// Any relay's claim takes them after the claim timeout: one that reads them
    /// publishes them, one that does not parks them again. Should the hand-over
    /// fail, they stay this consumer's, pending, and are parked at the next read.
    pub(super) async fn park_unreadable(
        &self,
        conn: &mut crate::redis_conn::Conn,
        entries: &HashMap<String, Vec<String>>,
    ) {
        for (stream, ids) in entries {
            let r: redis::RedisResult<redis::Value> = redis::cmd("XCLAIM")
                .arg(stream)
                .arg(crate::keys::RELAY_GROUP)
                .arg(PARKED)
                .arg(0)
                .arg(ids)
                .arg("JUSTID")
                .query_async(conn)
                .await;
            if let Err(e) = r {
                tracing::warn!(outbox = %stream, error = %e, "parking unreadable outbox entries failed; they stay pending here");
            }
        }
    }
}
