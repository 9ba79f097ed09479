//! Settling deliveries after their transaction: persisting a batch's orders in
//! transactions of the configured size, then acknowledging, storing refused orders
//! `failed`, or handing the deliveries back.
use super::Received;
use crate::broker::answered;
use crate::ordering::model::OrderBatch;
use crate::ordering::worker::attempt::Persisted;
use crate::ordering::worker::setup::Worker;
use crate::ordering::worker::timeout;
use anyhow::Result;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicNackOptions, BasicRejectOptions};
use lapin::Channel;
use tokio_util::sync::CancellationToken;

impl Worker {
    /// Persists the orders of `deliveries` and settles each delivery.
    pub(in crate::ordering::worker) async fn handle(
        &self,
        timeouts: &Channel,
        deliveries: Vec<Received>,
        stop: &CancellationToken,
    ) -> Result<()> {
        let mut good: Vec<(Delivery, OrderBatch)> = Vec::new();
        for Received(d, batch) in deliveries {
            match batch {
                Some(b) => good.push((d, b)),
                None => {
                    self.metrics.worker_poison.inc();
                    let reject = d.reject(BasicRejectOptions { requeue: false });
                    answered(self.broker.timeout(), "rejecting a poison message", reject).await?;
                }
            }
        }
        // Keep transactions to the configured size: split into chunks of whole
        // messages (a message larger than the size is a transaction of its own).
        let mut start = 0;
        while start < good.len() {
            let mut end = start;
            let mut n = 0;
            while end < good.len() && (end == start || n + good[end].1.orders.len() <= self.batch) {
                n += good[end].1.orders.len();
                end += 1;
            }
            let chunk = &good[start..end];
            let orders: Vec<_> = chunk.iter().flat_map(|(_, b)| b.orders.iter().copied()).collect();
            let intents: Vec<i64> = chunk.iter().filter_map(|(_, b)| b.intent).collect();
            match self.persist_retrying(&orders, &intents, stop).await {
                Persisted::Done(outcome) => {
                    self.count(outcome);
                    // Scheduled before the ack: a crash in between redelivers the
                    // batch, which schedules them again (the timeout is idempotent).
                    let ids = orders.iter().map(|o| o.id.get()).collect();
                    timeout::schedule(timeouts, &self.broker, self.payment_window, ids).await?;
                    for (d, _) in chunk {
                        let ack = d.ack(BasicAckOptions::default());
                        answered(self.broker.timeout(), "acknowledging a batch", ack).await?;
                    }
                }
                Persisted::Refused(e) if chunk.len() > 1 => {
                    tracing::warn!(error = %e, "a batch was refused; persisting its messages one by one");
                    for (d, b) in chunk {
                        self.settle_one(timeouts, d, b, stop).await?;
                    }
                }
                Persisted::Refused(e) => {
                    let (d, b) = &chunk[0];
                    self.store_refused(d, &b.orders, &e).await?;
                }
                Persisted::Release(e) => {
                    for (d, _) in &good[start..] {
                        let nack = d.nack(BasicNackOptions {
                            requeue: true,
                            multiple: false,
                        });
                        answered(self.broker.timeout(), "handing a batch back", nack).await?;
                    }
                    return Err(anyhow::anyhow!(
                        "could not persist for {:?}; handed the batch back: {e}",
                        self.hold_limit
                    ));
                }
                // Stopping while the database is down: the deliveries go back unacked.
                Persisted::Stopping => return Ok(()),
            }
            start = end;
        }
        Ok(())
    }

    pub(in crate::ordering::worker) async fn settle_one(
        &self,
        timeouts: &Channel,
        d: &Delivery,
        batch: &OrderBatch,
        stop: &CancellationToken,
    ) -> Result<()> {
        let orders = &batch.orders[..];
        let intents: Vec<i64> = batch.intent.into_iter().collect();
        match self.persist_retrying(orders, &intents, stop).await {
            Persisted::Done(outcome) => {
                self.count(outcome);
                let ids = orders.iter().map(|o| o.id.get()).collect();
                timeout::schedule(timeouts, &self.broker, self.payment_window, ids).await?;
                let ack = d.ack(BasicAckOptions::default());
                answered(self.broker.timeout(), "acknowledging a message", ack).await?;
            }
            Persisted::Refused(e) => self.store_refused(d, orders, &e).await?,
            Persisted::Release(e) => {
                let nack = d.nack(BasicNackOptions {
                    requeue: true,
                    multiple: false,
                });
                answered(self.broker.timeout(), "handing a message back", nack).await?;
                return Err(anyhow::anyhow!("could not persist; handed the message back: {e}"));
            }
            Persisted::Stopping => {}
        }
        Ok(())
    }
}
