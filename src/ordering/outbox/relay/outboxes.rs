//! Which outbox streams a relay reads.
use super::{Outbox, Relay, REGISTRY_EVERY};
use std::time::Instant;

impl Relay {
    /// The outboxes (voucher, shard) this relay reads: every shard of the flash sales
    /// in the voucher cache and those in Redis's registry of outboxes, so that orders
    /// keep flowing even while the cache is empty (Postgres unreachable since start-up).
    pub(super) async fn outboxes(&self) -> Vec<Outbox> {
        let mut ids: Vec<Outbox> = self
            .cache
            .flash_sales()
            .iter()
            .flat_map(|e| {
                let shards = e.voucher.flash.as_ref().map_or(1, |f| f.shards());
                let id = e.voucher.id;
                (0..shards).map(move |k| (id, k, shards))
            })
            .map(|(id, k, shards)| self.keys.outbox_at(id, k, shards))
            .collect();
        let stale = {
            let registry = self.memory.registry.lock().expect("registry poisoned");
            ids.extend(registry.1.iter().cloned());
            registry.0.is_none_or(|at| at.elapsed() >= REGISTRY_EVERY)
        };
        if stale {
            let read: redis::RedisResult<Vec<String>> = async {
                let mut conn = self.redis.conn().await?;
                redis::cmd("SMEMBERS")
                    .arg(self.keys.outboxes())
                    .query_async(&mut conn)
                    .await
            }
            .await;
            let mut registry = self.memory.registry.lock().expect("registry poisoned");
            registry.0 = Some(Instant::now());
            match read {
                Ok(listed) => {
                    let listed: Vec<Outbox> = listed.iter().filter_map(|m| self.keys.outbox_of_member(m)).collect();
                    ids.extend(listed.iter().cloned());
                    registry.1 = listed;
                }
                Err(e) => tracing::debug!(error = %e, "reading the registry of outboxes failed"),
            }
        }
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}
