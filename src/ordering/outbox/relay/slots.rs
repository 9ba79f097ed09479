//! Reading and acknowledging the outboxes slot by slot, so that one master's
//! trouble is its own: on a Redis Cluster the outboxes of different hash slots
//! (often on different masters) are read and acknowledged separately, and a slot
//! whose read or acknowledgement fails (its master unreachable, a key that is not
//! a stream) is logged and left for the next round while the other slots' orders
//! are published. A round fails only when every slot failed.
use super::{Read, Relay, BLOCK_MS, CLUSTER_POLL_MS};
use crate::keys::RELAY_GROUP;
use anyhow::{Context, Result};
use redis::streams::StreamReadReply;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

static OUTBOX_ACK: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("../../../../lua/outbox_ack.lua")));

/// XREADGROUP on streams of one hash slot; `block` waits up to [`BLOCK_MS`] for new
/// entries.
async fn read_group(
    conn: &mut crate::redis_conn::Conn,
    consumer: &str,
    batch: usize,
    streams: &[String],
    read: Read,
    block: bool,
) -> redis::RedisResult<Option<StreamReadReply>> {
    let mut cmd = redis::cmd("XREADGROUP");
    cmd.arg("GROUP").arg(RELAY_GROUP).arg(consumer).arg("COUNT").arg(batch);
    if read == Read::New && block {
        cmd.arg("BLOCK").arg(BLOCK_MS);
    }
    cmd.arg("STREAMS").arg(streams);
    let id = if read == Read::New { ">" } else { "0" };
    for _ in streams {
        cmd.arg(id);
    }
    cmd.query_async(conn).await
}

/// How often a failing slot is logged at warning level.
const WARN_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

impl Relay {
    /// Whether a failure of `slot` is to be logged now: once every [`WARN_EVERY`]
    /// per slot (a silent master's slots fail on every round, every 20 ms).
    fn warn_for_slot(&self, slot: u16) -> bool {
        let mut warned = self.memory.slot_warned.lock().expect("slot warnings poisoned");
        let now = std::time::Instant::now();
        match warned.get(&slot) {
            Some(at) if now.duration_since(*at) < WARN_EVERY => false,
            _ => {
                warned.insert(slot, now);
                true
            }
        }
    }

    /// `streams` grouped by hash slot, in the order met (one group, slot 0, on a
    /// single Redis).
    fn by_slot(&self, streams: &[String]) -> Vec<(u16, Vec<String>)> {
        let mut by_slot: Vec<(u16, Vec<String>)> = Vec::new();
        for s in streams {
            let slot = if self.redis.is_cluster() {
                crate::keys::slot(s.as_bytes())
            } else {
                0
            };
            match by_slot.iter_mut().find(|g| g.0 == slot) {
                Some(g) => g.1.push(s.clone()),
                None => by_slot.push((slot, vec![s.clone()])),
            }
        }
        by_slot
    }

    /// Reads the outboxes: one XREADGROUP per hash slot (one XREADGROUP may only
    /// name streams of one slot on a cluster), at once and without blocking when
    /// there are several (a blocked read would hold up the others on its node's
    /// connection; an idle round sleeps a short poll instead).
    pub(super) async fn read(
        &self,
        conn: &mut crate::redis_conn::Conn,
        streams: &[String],
        read: Read,
    ) -> Result<Option<StreamReadReply>> {
        let by_slot = self.by_slot(streams);
        let block = by_slot.len() == 1;
        let reread: HashSet<u16> = self.memory.reread.lock().expect("reread poisoned").clone();
        let replies = futures::future::join_all(by_slot.iter().map(|(slot, group)| {
            let mut conn = conn.clone();
            let read = if reread.contains(slot) { Read::OwnPending } else { read };
            async move {
                let count = self.entries_per_read();
                let r = match read_group(&mut conn, &self.consumer, count, group, read, block).await {
                    // Redis lost the consumer group (or the stream): made again.
                    Err(e) if e.code() == Some("NOGROUP") => {
                        self.ensure_groups(group).await?;
                        read_group(&mut conn, &self.consumer, count, group, read, block).await?
                    }
                    other => other?,
                };
                // One read of its pending entries, then new ones again: entries
                // left pending on purpose (a sale under a scoped repair) would
                // otherwise fill every re-read, and the slot never read anything
                // new. What one read did not reach is claimed after the claim
                // timeout, as before.
                if read == Read::OwnPending {
                    self.memory.reread.lock().expect("reread poisoned").remove(slot);
                }
                anyhow::Ok(r)
            }
        }))
        .await;
        let mut keys = Vec::new();
        let mut failed: Option<anyhow::Error> = None;
        let mut failures = 0;
        for ((slot, group), reply) in by_slot.iter().zip(replies) {
            match reply {
                Ok(r) => keys.extend(r.into_iter().flat_map(|r| r.keys)),
                Err(e) => {
                    failures += 1;
                    // A read that timed out may still have been carried out (a master
                    // that stalled runs it once it wakes): its entries would be
                    // pending for this consumer, unseen until claimed. This slot's
                    // next read takes this consumer's pending entries first (only
                    // this slot's: the others go on reading new entries).
                    self.memory.reread.lock().expect("reread poisoned").insert(*slot);
                    if self.warn_for_slot(*slot) {
                        tracing::warn!(slot, outboxes = ?group, error = %format!("{e:#}"), "reading one slot's outboxes failed; the others go on (said once per slot every 10 s)");
                    }
                    failed.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failed.filter(|_| failures == by_slot.len()) {
            return Err(e).context("XREADGROUP on the outboxes");
        }
        if keys.is_empty() && read == Read::New && !block {
            tokio::time::sleep(Duration::from_millis(CLUSTER_POLL_MS)).await;
        }
        Ok((!keys.is_empty()).then_some(StreamReadReply { keys }))
    }

    /// XACK the published entries and drop what no relay needs any more
    /// (`lua/outbox_ack.lua`), one script per outbox, all at once. An outbox whose
    /// acknowledgement fails keeps its entries pending: they are claimed again
    /// after the claim timeout and published again (the worker writes each order
    /// once). Fails only when every acknowledgement failed.
    pub(super) async fn acknowledge(
        &self,
        conn: &crate::redis_conn::Conn,
        done: &HashMap<String, Vec<String>>,
    ) -> Result<()> {
        let results = futures::future::join_all(done.iter().map(|(stream, ids)| {
            let mut conn = conn.clone();
            async move {
                let dropped: redis::RedisResult<i64> = OUTBOX_ACK
                    .key(stream)
                    .arg(RELAY_GROUP)
                    .arg(ids)
                    .invoke_async(&mut conn)
                    .await;
                (stream, dropped)
            }
        }))
        .await;
        let mut failed = None;
        let mut failures = 0;
        for (stream, r) in results {
            if let Err(e) = r {
                failures += 1;
                tracing::warn!(outbox = %stream, error = %e, "acknowledging one outbox failed; its entries stay pending");
                failed.get_or_insert(e);
            }
        }
        match failed {
            Some(e) if failures == done.len() => Err(e).context("acknowledging outbox entries"),
            _ => Ok(()),
        }
    }
}
