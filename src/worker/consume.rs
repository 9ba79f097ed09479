//! Consuming: the connection to RabbitMQ, the loop that gathers whatever has
//! arrived into one batch, and settling each delivery after its transaction.
use super::attempt::Persisted;
use super::heartbeat::Held;
use super::setup::Worker;
use super::timeout;
use crate::broker::answered;
use crate::order::model::OrderBatch;
use anyhow::{Context, Result};
use futures::{FutureExt, StreamExt};
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions, BasicRejectOptions};
use lapin::types::FieldTable;
use lapin::Channel;
use tokio_util::sync::CancellationToken;

/// A delivery received and parsed: its order batch, or `None` if it is not one.
pub(super) struct Received(Delivery, Option<OrderBatch>);

impl Received {
    fn orders(&self) -> usize {
        self.1.as_ref().map_or(0, |b| b.orders.len())
    }
}

impl Worker {
    /// Consumes until `stop`, reconnecting after failures.
    pub async fn run(&self, stop: CancellationToken) {
        crate::supervise::supervise("worker", &stop, || self.run_connected(&stop)).await
    }

    async fn run_connected(&self, stop: &CancellationToken) -> Result<()> {
        let (conn, channel) = self.broker.open().await?;
        // Closed however this ends (an error, a task aborted): lapin keeps a
        // consumer whose `basic_consume` was cut short registered, with its channel
        // and connection open and deliveries sitting unacknowledged on it.
        let _closes = crate::broker::CloseOnDrop::new(&channel);
        channel
            .basic_qos(self.prefetch, BasicQosOptions::default())
            .await
            .context("setting the prefetch window")?;
        // Payment timeouts are published on their own channel, with confirms.
        let timeouts = conn.create_channel().await.context("opening the timeout channel")?;
        timeouts
            .confirm_select(Default::default())
            .await
            .context("enabling confirms on the timeout channel")?;
        let mut consumer = channel
            .basic_consume(
                self.broker.keys().orders_queue().into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .context("starting to consume orders")?;
        let dead_channel = conn.create_channel().await.context("opening the dead-letter channel")?;
        let _closes_dead = crate::broker::CloseOnDrop::new(&dead_channel);
        dead_channel
            .basic_qos(1, BasicQosOptions::default())
            .await
            .context("setting the dead-letter prefetch")?;
        let mut dead = dead_channel
            .basic_consume(
                self.broker.keys().dead_queue().into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .context("starting to consume dead letters")?;
        tracing::info!("worker consuming");
        // Batches in flight, each its own transaction: batches of one sale insert in
        // parallel and wait for each other only at the stock update (see
        // `persist::unlocked`).
        let mut running = futures::stream::FuturesUnordered::new();
        let mut failure = None;
        let per_batch = (self.prefetch as usize).div_ceil(self.in_flight).max(1);
        // A delivery that arrived while a batch was gathered but would have taken
        // it past `self.batch` orders: the first of the next batch.
        let mut carried: Option<Received> = None;
        loop {
            let first = match carried.take() {
                // Not once stopping: the select below sees the stop and leaves
                // the carried delivery unacknowledged, for the broker to requeue.
                Some(c) if running.len() < self.in_flight && !stop.is_cancelled() => Ok(c),
                other => {
                    carried = other;
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        Some(done) = running.next(), if !running.is_empty() => {
                            if let Err(e) = done {
                                failure = Some(e);
                                break;
                            }
                            continue;
                        }
                        d = consumer.next(), if running.len() < self.in_flight && carried.is_none() => d
                            .context("the consumer ended")
                            .and_then(|d| d.context("receiving a delivery"))
                            .map(|d| self.parse(d)),
                        d = dead.next() => {
                            // The batches in flight finish first: a dead letter of the same
                            // sale would wait for their voucher locks while they, not
                            // polled, waited for it.
                            while let Some(done) = running.next().await {
                                if let Err(e) = done {
                                    failure.get_or_insert(e);
                                }
                            }
                            if failure.is_some() {
                                break;
                            }
                            let dead_letter = async {
                                let d = d.context("the dead-letter consumer ended")?.context("receiving a dead letter")?;
                                let _held = Held::new(&self.holding, 1);
                                self.handle_dead(&timeouts, d, stop).await
                            };
                            if let Err(e) = dead_letter.await {
                                failure = Some(e);
                                break;
                            }
                            continue;
                        }
                    }
                }
            };
            let first = match first {
                Ok(d) => d,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            };
            // Whatever else has already arrived joins this batch, up to its share of
            // the prefetch window and `self.batch` orders (one transaction); nothing
            // waits for more. Batches of whole transactions keep every batch in
            // flight busy to the end of a backlog: a batch of several transactions
            // ran them one after another while the others had finished.
            let mut orders = first.orders();
            let mut deliveries = vec![first];
            while deliveries.len() < per_batch && orders < self.batch {
                match consumer.next().now_or_never() {
                    Some(Some(Ok(d))) => {
                        let d = self.parse(d);
                        if orders + d.orders() > self.batch {
                            carried = Some(d);
                            break;
                        }
                        orders += d.orders();
                        deliveries.push(d);
                    }
                    _ => break,
                }
            }
            let held = Held::new(&self.holding, deliveries.len());
            let timeouts = &timeouts;
            running.push(async move {
                let _held = held;
                self.handle(timeouts, deliveries, stop).await
            });
        }
        // The batches in flight finish (or, stopping, hand back what they hold)
        // before the connection closes: a transaction dropped half way would keep
        // its locks until its connection is used again.
        while let Some(done) = running.next().await {
            if let Err(e) = done {
                failure.get_or_insert(e);
            }
        }
        if let Some(e) = failure {
            self.broker.close_conn(&conn, "worker failed").await;
            return Err(e);
        }
        // Unacknowledged deliveries return to the queue when the channel closes.
        self.broker.close_conn(&conn, "worker stopping").await;
        Ok(())
    }

    /// A delivery and its order batch (`None`: not an order batch, poison).
    fn parse(&self, d: Delivery) -> Received {
        let batch = serde_json::from_slice::<OrderBatch>(&d.data)
            .map_err(|e| tracing::error!(error = %e, bytes = d.data.len(), "poison message; dead-lettering it"))
            .ok();
        Received(d, batch)
    }

    /// Persists the orders of `deliveries` and settles each delivery.
    pub(super) async fn handle(
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
                    let ids = orders.iter().map(|o| o.id).collect();
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

    pub(super) async fn settle_one(
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
                let ids = orders.iter().map(|o| o.id).collect();
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
