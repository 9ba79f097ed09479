//! [`follow`]: the task that keeps a cache current through the Redis pub/sub
//! channel of voucher events, reloading it at start, on every reconnection and every
//! `REFRESH_EVERY`.
use super::store::VoucherCache;
use crate::keys::Keys;
use crate::redis_conn::Redis;
use crate::sales::stock::Event;
use anyhow::{Context, Result};
use futures::StreamExt;
use sqlx::PgPool;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const REFRESH_EVERY: Duration = Duration::from_secs(30);

/// Keeps `cache` current until `stop`: subscribe, reload, apply events, and start
/// over after any failure.
pub async fn follow(cache: Arc<VoucherCache>, pg: PgPool, redis: Redis, keys: Keys, stop: CancellationToken) {
    crate::supervise::supervise("voucher cache", &stop, || {
        follow_once(&cache, &pg, &redis, &keys, &stop)
    })
    .await
}

async fn follow_once(
    cache: &VoucherCache,
    pg: &PgPool,
    redis: &Redis,
    keys: &Keys,
    stop: &CancellationToken,
) -> Result<()> {
    let mut pubsub = redis.pubsub().await.context("opening pub/sub")?;
    pubsub
        .subscribe(keys.events())
        .await
        .context("subscribing to voucher events")?;
    // Subscribed first, then reloaded: no change can fall between the two. The
    // sold-out flags stay: a stock event missed meanwhile is covered by their TTL.
    cache.reload(pg, false).await?;
    let mut messages = pubsub.on_message();
    let mut refresh = tokio::time::interval(REFRESH_EVERY);
    refresh.tick().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = refresh.tick() => { cache.reload(pg, false).await?; }
            msg = messages.next() => {
                let Some(msg) = msg else { anyhow::bail!("pub/sub stream ended") };
                let payload: String = msg.get_payload().unwrap_or_default();
                match Event::decode(&payload) {
                    Some(event) => {
                        if let Err(e) = cache.apply(pg, event).await {
                            tracing::warn!(error = %format!("{e:#}"), ?event, "applying a voucher event failed; reloading");
                            cache.reload(pg, true).await?;
                        }
                    }
                    None => tracing::warn!(payload, "ignoring an unknown voucher event"),
                }
            }
        }
    }
}
