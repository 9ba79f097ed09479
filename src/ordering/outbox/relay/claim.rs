//! Entries other relays left behind: claimed after the claim timeout, and the
//! consumer groups Redis lost made again.
use super::Relay;
use crate::keys::RELAY_GROUP;
use anyhow::{Context, Result};

/// At most this many `XAUTOCLAIM` calls per outbox and claim round.
const CLAIM_PAGES: usize = 64;

impl Relay {
    /// Takes over entries other relays left pending longer than the claim timeout.
    ///
    /// Each outbox's pending list is walked to its end (by `XAUTOCLAIM`'s cursor, at
    /// most [`CLAIM_PAGES`] calls a round): one call looks at no more than ten times
    /// its `COUNT` entries, and entries that are pending but not idle (parked
    /// unreadable entries just handed back, see `Relay::park_unreadable`) at the
    /// head of the list would otherwise hide a dead relay's entries behind them.
    pub async fn claim(&self) -> Result<usize> {
        let mut claimed = 0;
        let mut conn = self.redis.conn().await?;
        for stream in self.outboxes().await {
            let mut cursor = "0-0".to_owned();
            for _ in 0..CLAIM_PAGES {
                let reply: redis::RedisResult<redis::Value> = redis::cmd("XAUTOCLAIM")
                    .arg(&stream)
                    .arg(RELAY_GROUP)
                    .arg(&self.consumer)
                    .arg(self.tuning.claim_idle.as_millis() as u64)
                    .arg(&cursor)
                    .arg("COUNT")
                    .arg(self.tuning.batch)
                    .arg("JUSTID")
                    .query_async(&mut conn)
                    .await;
                let next = match reply {
                    Ok(redis::Value::Array(parts)) => {
                        if let Some(redis::Value::Array(ids)) = parts.get(1) {
                            claimed += ids.len();
                        }
                        match parts.first() {
                            Some(redis::Value::BulkString(c)) => String::from_utf8_lossy(c).into_owned(),
                            Some(redis::Value::SimpleString(c)) => c.clone(),
                            _ => "0-0".to_owned(),
                        }
                    }
                    other => {
                        self.claim_failed(&stream, other).await;
                        break;
                    }
                };
                if next == "0-0" {
                    break;
                }
                cursor = next;
            }
        }
        if claimed > 0 {
            tracing::info!(claimed, "took over outbox entries left pending by another relay");
        }
        Ok(claimed)
    }

    /// What a failed or unexpected `XAUTOCLAIM` reply on one outbox means.
    async fn claim_failed(&self, stream: &str, reply: redis::RedisResult<redis::Value>) {
        match reply {
            Ok(_) => {}
            Err(err) if err.code() == Some("NOGROUP") => {
                if let Err(e) = self.ensure_groups(&[stream.to_owned()]).await {
                    tracing::warn!(outbox = %stream, error = %format!("{e:#}"), "making a consumer group failed");
                }
            }
            // One outbox's trouble (its master unreachable, a key that is not a
            // stream) is its own: the others are still claimed.
            Err(err) => tracing::warn!(outbox = %stream, error = %err, "XAUTOCLAIM on one outbox failed"),
        }
    }

    /// Creates missing consumer groups (after Redis lost them).
    pub(super) async fn ensure_groups(&self, streams: &[String]) -> Result<()> {
        let mut conn = self.redis.conn().await?;
        for s in streams {
            let r: redis::RedisResult<()> = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(s)
                .arg(RELAY_GROUP)
                .arg("0")
                .arg("MKSTREAM")
                .query_async(&mut conn)
                .await;
            match r {
                Ok(()) => {}
                Err(e) if e.code() == Some("BUSYGROUP") => {}
                Err(e) => return Err(e).context("XGROUP CREATE"),
            }
        }
        Ok(())
    }
}
