//! Entries other relays left behind: claimed after the claim timeout, and the
//! consumer groups Redis lost made again.
use super::Relay;
use crate::keys::RELAY_GROUP;
use anyhow::{Context, Result};

impl Relay {
    /// Takes over entries other relays left pending longer than the claim timeout.
    pub async fn claim(&self) -> Result<usize> {
        let mut claimed = 0;
        let mut conn = self.redis.conn().await?;
        for stream in self.outboxes().await {
            let reply: redis::RedisResult<redis::Value> = redis::cmd("XAUTOCLAIM")
                .arg(&stream)
                .arg(RELAY_GROUP)
                .arg(&self.consumer)
                .arg(self.claim_idle.as_millis() as u64)
                .arg("0-0")
                .arg("COUNT")
                .arg(self.batch)
                .arg("JUSTID")
                .query_async(&mut conn)
                .await;
            match reply {
                Ok(redis::Value::Array(parts)) => {
                    if let Some(redis::Value::Array(ids)) = parts.get(1) {
                        claimed += ids.len();
                    }
                }
                Ok(_) => {}
                Err(err) if err.code() == Some("NOGROUP") => {
                    if let Err(e) = self.ensure_groups(std::slice::from_ref(&stream)).await {
                        tracing::warn!(outbox = %stream, error = %format!("{e:#}"), "making a consumer group failed");
                    }
                }
                // One outbox's trouble (its master unreachable, a key that is not a
                // stream) is its own: the others are still claimed.
                Err(err) => tracing::warn!(outbox = %stream, error = %err, "XAUTOCLAIM on one outbox failed"),
            }
        }
        if claimed > 0 {
            tracing::info!(claimed, "took over outbox entries left pending by another relay");
        }
        Ok(claimed)
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
