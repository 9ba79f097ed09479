//! Publishing what a round read: each message of orders recorded first in an
//! intent ([`super::intent`]), then published with confirms; orders of a sale
//! repaired meanwhile settled first ([`super::read_before_repair`]).
use super::{intent, Origin, Relay};
use crate::broker::{publish_confirmed, ORDERS_ROUTING_KEY};
use crate::ordering::model::{OrderBatch, OrderMsg};
use anyhow::{Context, Result};
use lapin::{BasicProperties, Channel};

impl Relay {
    /// Publishes orders this relay read (`points`: the latest point read of each
    /// shard, checked), each recorded first in an intent (see `intent`); orders not of
    /// their sale's generation are settled first (see `read_before_repair`). Returns how many it
    /// published, or `None` when a repair kept refusing the intent: what is left
    /// stays pending in the outbox (orders without an entry are held).
    pub async fn publish_read(
        &self,
        conn: &mut crate::redis_conn::Conn,
        channel: &Channel,
        orders: Vec<(OrderMsg, Origin)>,
        points: &[(String, crate::recovery::Point)],
    ) -> Result<Option<usize>> {
        let mut published = 0;
        let mut todo = orders;
        for attempt in 0..3 {
            let vouchers: Vec<i64> = todo.iter().map(|(o, _)| o.voucher_id.get()).collect();
            let gens = self.recovery.generations(&vouchers).await?;
            let (stale, mut fresh): (Vec<_>, Vec<_>) = std::mem::take(&mut todo)
                .into_iter()
                .partition(|(o, _)| o.epoch != gens.get(&o.voucher_id.get()).copied().unwrap_or(0));
            if !stale.is_empty() {
                fresh.extend(self.settle_stale(conn, stale, &gens).await?);
            }
            let chunks: Vec<std::ops::Range<usize>> = messages(fresh.len(), self.tuning.batch).collect();
            let mut refused = None;
            for (k, range) in chunks.iter().enumerate() {
                let chunk: Vec<OrderMsg> = fresh[range.clone()].iter().map(|(o, _)| *o).collect();
                // Recorded before the publish (see `intent`), with the shards' points,
                // while every sale is still at the generation its orders are of.
                let Some(intent) =
                    intent::record(&self.pg, self.keys.namespace(), &chunk, points, &self.consumer, false).await?
                else {
                    refused = Some(k);
                    break;
                };
                if let Err(e) = self.publish(channel, &chunk, intent).await {
                    self.metrics.relay_confirms.with_label_values(&["error"]).inc();
                    return Err(e);
                }
                self.metrics.relay_confirms.with_label_values(&["ack"]).inc();
                self.metrics.relay_published.inc_by(chunk.len() as u64);
                published += chunk.len();
                let now_ms = chrono::Utc::now().timestamp_millis();
                for o in &chunk {
                    self.metrics
                        .relay_lag_seconds
                        .observe((now_ms - o.created_ms).max(0) as f64 / 1000.0);
                }
            }
            let Some(k) = refused else {
                return Ok(Some(published));
            };
            // A repair took a sale's next generation meanwhile: the rest is settled
            // again against it (an entry may have gone with what it repaired).
            todo = chunks[k..]
                .iter()
                .flat_map(|r| fresh[r.clone()].iter().cloned())
                .collect();
            tracing::info!(
                attempt,
                orders = todo.len(),
                "a repair began: settling the rest of the round again"
            );
        }
        // Still refused: entries stay pending (read again), orders without one held.
        let entryless: Vec<(OrderMsg, Origin)> = todo.into_iter().filter(|(_, o)| o.entry.is_none()).collect();
        self.hold(&entryless);
        Ok(None)
    }

    async fn publish(&self, channel: &Channel, orders: &[OrderMsg], intent: i64) -> Result<()> {
        let body = serde_json::to_vec(&OrderBatch {
            orders: orders.to_vec(),
            intent: Some(intent),
        })?;
        let k = self.broker.keys();
        let props = BasicProperties::default().with_content_type("application/json".into());
        publish_confirmed(
            channel,
            &k.orders_exchange(),
            ORDERS_ROUTING_KEY,
            &body,
            props,
            self.tuning.confirm_timeout,
        )
        .await
        .context("publishing an order batch")
    }
}

/// The messages of a round of `total` orders, as ranges of its orders: `total`
/// split into `max(1, total / batch)` messages whose sizes differ by one at most,
/// each of `batch` to `2 × batch − 1` orders (one message of `total` if fewer than
/// `batch`, none if `total` is 0). A round split into messages of exactly `batch`
/// left a small message for its remainder (1,027 orders went as 1,000 and 27): in
/// a cost run, 147
/// messages of 680 orders on average where 104 of 962 carry the same rounds
/// (docs/PERFORMANCE.md). Each message costs a relay intent, a publish and its
/// confirm, and a worker transaction.
fn messages(total: usize, batch: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    // No message for a round without orders (its entries were all malformed).
    let n = if total == 0 { 0 } else { (total / batch.max(1)).max(1) };
    let (size, longer) = (total / n.max(1), total % n.max(1));
    // The first `longer` messages carry one order more.
    (0..n).map(move |k| {
        let start = k * size + k.min(longer);
        start..start + size + usize::from(k < longer)
    })
}

#[cfg(test)]
mod tests {
    use super::messages;

    #[test]
    fn a_round_is_split_into_messages_of_batch_to_twice_batch() {
        for batch in [1usize, 4, 1000] {
            for total in 1..(5 * batch + 3) {
                let ranges: Vec<_> = messages(total, batch).collect();
                assert_eq!(ranges.first().map(|r| r.start), Some(0));
                assert!(ranges.windows(2).all(|w| w[0].end == w[1].start), "{ranges:?}");
                assert_eq!(ranges.last().map(|r| r.end), Some(total));
                let sizes: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
                assert_eq!(sizes.len(), (total / batch).max(1), "{total} orders, batch {batch}");
                if total >= batch {
                    assert!(
                        sizes.iter().all(|s| (batch..2 * batch).contains(s)),
                        "{total}/{batch}: {sizes:?}"
                    );
                } else {
                    assert_eq!(sizes, vec![total]);
                }
            }
        }
        assert_eq!(messages(0, 1000).count(), 0, "no message without orders");
        let sizes = |t, b| messages(t, b).map(|r| r.len()).collect::<Vec<_>>();
        assert_eq!(sizes(1027, 1000), vec![1027]);
        assert_eq!(sizes(3602, 1000), vec![1201, 1201, 1200]);
    }
}
