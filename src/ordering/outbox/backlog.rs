//! [`backlog`]: how many entries wait in some sales' outbox streams.
use crate::keys::Keys;
use crate::redis_conn::Redis;
use anyhow::Result;

/// Entries in the outbox streams of `sales` (voucher id, shards), every shard:
/// one pipelined `XLEN` each, 0 for none.
pub async fn backlog(redis: &Redis, keys: &Keys, sales: impl IntoIterator<Item = (i64, u32)>) -> Result<i64> {
    let streams: Vec<String> = sales
        .into_iter()
        .flat_map(|(id, shards)| (0..shards).map(move |k| keys.outbox_at(id, k, shards)))
        .collect();
    if streams.is_empty() {
        return Ok(0);
    }
    let mut pipe = redis::pipe();
    for s in &streams {
        pipe.cmd("XLEN").arg(s);
    }
    let mut conn = redis.conn().await?;
    let lens: Vec<i64> = pipe.query_async(&mut conn).await?;
    Ok(lens.iter().sum())
}
