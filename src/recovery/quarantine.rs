//! Outbox entries a repair cannot read as entries (corrupt: not written by
//! `reserve.lua`, a repair or a late admission, or damaged): moved out of the
//! outbox into the shard's quarantine stream, each with the most orders it may
//! hold (`bound`, [`crate::ordering::outbox::entry::most_orders`]), and counted as that many
//! units sold: whatever acknowledged orders it held, their units are never sold
//! again, so nothing is oversold; the sale reopens. Each is an incident, logged
//! with the entry's fields for people. An entry of a newer format is not corrupt:
//! the repair waits for a process that reads it (`crate::ordering::outbox::read_outbox`).
use super::desk::Recovery;
use crate::redis_conn::Conn;
use anyhow::{Context, Result};
use redis::streams::{StreamId, StreamRangeReply};

impl Recovery {
    /// Moves `corrupt` entries of shard `k`'s outbox into its quarantine stream,
    /// and returns the units every quarantined entry of the shard holds back
    /// (those moved now and those of earlier repairs).
    pub(super) async fn quarantine(
        &self,
        conn: &mut Conn,
        voucher: i64,
        k: u32,
        shards: u32,
        corrupt: &[StreamId],
    ) -> Result<i64> {
        let outbox = self.keys.outbox_at(voucher, k, shards);
        let quarantine = self.keys.quarantine_at(voucher, k, shards);
        for e in corrupt {
            let bound = crate::ordering::outbox::entry::most_orders(e);
            let mut add = redis::cmd("XADD");
            add.arg(&quarantine)
                .arg("*")
                .arg("from")
                .arg(&e.id)
                .arg("bound")
                .arg(bound);
            let mut fields: Vec<(&String, &redis::Value)> = e.map.iter().collect();
            fields.sort_by(|a, b| a.0.cmp(b.0));
            for (field, value) in &fields {
                add.arg(format!("entry.{field}"));
                match value {
                    redis::Value::BulkString(b) => add.arg(b.as_slice()),
                    other => add.arg(format!("{other:?}")),
                };
            }
            // One transaction (the keys share the shard's slot): the entry is in
            // exactly one of the two streams.
            let _: redis::Value = redis::pipe()
                .atomic()
                .add_command(add)
                .cmd("XACK")
                .arg(&outbox)
                .arg(crate::keys::RELAY_GROUP)
                .arg(&e.id)
                .cmd("XDEL")
                .arg(&outbox)
                .arg(&e.id)
                .query_async(conn)
                .await
                .context("quarantining a corrupt outbox entry")?;
            self.metrics
                .worker_incidents
                .with_label_values(&["quarantined_outbox_entry"])
                .inc();
            tracing::error!(
                voucher,
                shard = k,
                entry = %e.id,
                bound,
                fields = ?fields,
                "INCIDENT: an outbox entry that is not an entry was moved to the shard's quarantine; \
                 the most orders it may hold are counted as sold"
            );
        }
        let held: StreamRangeReply = redis::cmd("XRANGE")
            .arg(&quarantine)
            .arg("-")
            .arg("+")
            .query_async(conn)
            .await
            .context("reading a shard's quarantine")?;
        Ok(held.ids.iter().map(|e| e.get::<i64>("bound").unwrap_or(1000)).sum())
    }
}
