//! How far the relay is behind on a sale's outboxes: what the admin console's live
//! numbers (`GET /api/v1/admin/vouchers/{id}/live`) show of the relay.
use crate::keys::Keys;
use crate::redis_conn::Redis;
use anyhow::{Context, Result};
use serde::Serialize;
use utoipa::ToSchema;

/// The sale's outbox, as the relay sees it: every shard's stream of a sharded sale.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct RelayState {
    /// Entries in the sale's outbox streams (every shard's) not yet published to
    /// RabbitMQ. An entry carries the orders one call of the order script
    /// admitted: one order at a time, or several that arrived together.
    pub outbox_backlog: i64,
    /// How long the oldest of them has waited, in milliseconds by Redis's clock
    /// (the entry's id is Redis's time when its orders were admitted); 0 when the
    /// outbox is empty.
    pub lag_ms: i64,
    /// A sharded sale's (`stock_shards` > 1) backlog per shard, in shard order
    /// (their sum is `outbox_backlog`). Absent for a sale of one shard.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<Vec<ShardRelay>>,
}

/// One shard's outbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct ShardRelay {
    /// 0 .. stock_shards − 1.
    pub shard: u32,
    pub outbox_backlog: i64,
    /// As `lag_ms`, for this shard's oldest entry.
    pub lag_ms: i64,
}

/// Reads each shard's outbox length and oldest entry in one `MULTI` per shard (one
/// key, one slot; the shards at once), then Redis's clock. `TIME` has no key, so
/// it is not part of a transaction: on Redis Cluster a transaction must keep to
/// one slot.
pub async fn relay_state(redis: &Redis, keys: &Keys, voucher_id: i64, shards: u32) -> Result<RelayState> {
    let shards = shards.max(1);
    let conn = redis.conn().await?;
    type Oldest = Vec<(String, Vec<(String, redis::Value)>)>;
    let reads = (0..shards).map(|k| {
        let mut conn = conn.clone();
        let outbox = keys.outbox_at(voucher_id, k, shards);
        async move {
            let (len, oldest): (i64, Oldest) = redis::pipe()
                .atomic()
                .cmd("XLEN")
                .arg(&outbox)
                .cmd("XRANGE")
                .arg(&outbox)
                .arg("-")
                .arg("+")
                .arg("COUNT")
                .arg(1)
                .query_async(&mut conn)
                .await
                .context("reading the sale's outbox")?;
            anyhow::Ok((len, oldest.first().and_then(|(id, _)| entry_ms(id))))
        }
    });
    let read = futures::future::try_join_all(reads).await?;
    // Read after the entries: the lag is never negative on one server's clock.
    let mut conn = conn;
    let (secs, micros): (i64, i64) = redis::cmd("TIME")
        .query_async(&mut conn)
        .await
        .context("reading Redis's clock")?;
    let now_ms = secs * 1000 + micros / 1000;
    let lag = |admitted_ms: Option<i64>| admitted_ms.map_or(0, |ms| (now_ms - ms).max(0));
    let per_shard: Vec<ShardRelay> = read
        .iter()
        .enumerate()
        .map(|(k, &(len, oldest))| ShardRelay {
            shard: k as u32,
            outbox_backlog: len,
            lag_ms: lag(oldest),
        })
        .collect();
    Ok(RelayState {
        outbox_backlog: per_shard.iter().map(|s| s.outbox_backlog).sum(),
        lag_ms: per_shard.iter().map(|s| s.lag_ms).max().unwrap_or(0),
        shards: (shards > 1).then_some(per_shard),
    })
}

/// The time in a stream entry's id (`<ms>-<seq>`).
fn entry_ms(id: &str) -> Option<i64> {
    id.split_once('-')?.0.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_outbox_entry_id_carries_its_admission_time() {
        assert_eq!(super::entry_ms("1763800000123-4"), Some(1_763_800_000_123));
        assert_eq!(super::entry_ms("garbage"), None);
    }
}
