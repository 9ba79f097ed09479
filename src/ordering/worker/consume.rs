//! Consuming: the connection to RabbitMQ, the loop that gathers whatever has
//! arrived into one batch, and settling each delivery after its transaction.
use super::heartbeat::Held;
use super::setup::Worker;
use crate::ordering::model::OrderBatch;
use anyhow::{Context, Result};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use lapin::message::Delivery;
use lapin::options::{BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Consumer};
use std::future::Future;
use tokio_util::sync::CancellationToken;

mod settle;

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
        let mut consumer = consume(
            &channel,
            self.broker.keys().orders_queue(),
            "starting to consume orders",
        )
        .await?;
        let dead_channel = conn.create_channel().await.context("opening the dead-letter channel")?;
        let _closes_dead = crate::broker::CloseOnDrop::new(&dead_channel);
        dead_channel
            .basic_qos(1, BasicQosOptions::default())
            .await
            .context("setting the dead-letter prefetch")?;
        let mut dead = consume(
            &dead_channel,
            self.broker.keys().dead_queue(),
            "starting to consume dead letters",
        )
        .await?;
        tracing::info!("worker consuming");
        let failure = self.batches(&timeouts, &mut consumer, &mut dead, stop).await;
        if let Some(e) = failure {
            self.broker.close_conn(&conn, "worker failed").await;
            return Err(e);
        }
        // Unacknowledged deliveries return to the queue when the channel closes.
        self.broker.close_conn(&conn, "worker stopping").await;
        Ok(())
    }

    /// Gathers what has arrived into batches and runs them, a dead letter in
    /// between when one comes, until `stop` or a failure; returns the failure once
    /// the batches in flight have finished.
    async fn batches(
        &self,
        timeouts: &Channel,
        consumer: &mut Consumer,
        dead: &mut Consumer,
        stop: &CancellationToken,
    ) -> Option<anyhow::Error> {
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
                            finish(&mut running, &mut failure).await;
                            if failure.is_some() {
                                break;
                            }
                            if let Err(e) = self.dead_letter(timeouts, d, stop).await {
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
            let deliveries = self.gather(first, consumer, &mut carried, per_batch);
            let held = Held::new(&self.holding, deliveries.len());
            running.push(async move {
                let _held = held;
                self.handle(timeouts, deliveries, stop).await
            });
        }
        // The batches in flight finish (or, stopping, hand back what they hold)
        // before the connection closes: a transaction dropped half way would keep
        // its locks until its connection is used again.
        finish(&mut running, &mut failure).await;
        failure
    }

    /// One batch: `first`, and whatever else has already arrived, up to
    /// `per_batch` deliveries and `self.batch` orders; a delivery that would take
    /// it past `self.batch` orders is left in `carried`, for the next batch.
    fn gather(
        &self,
        first: Received,
        consumer: &mut Consumer,
        carried: &mut Option<Received>,
        per_batch: usize,
    ) -> Vec<Received> {
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
                        *carried = Some(d);
                        break;
                    }
                    orders += d.orders();
                    deliveries.push(d);
                }
                _ => break,
            }
        }
        deliveries
    }

    /// Handles the dead letter `d` (counted as held meanwhile), or fails if the
    /// dead-letter consumer ended or failed.
    async fn dead_letter(
        &self,
        timeouts: &Channel,
        d: Option<lapin::Result<Delivery>>,
        stop: &CancellationToken,
    ) -> Result<()> {
        let d = d
            .context("the dead-letter consumer ended")?
            .context("receiving a dead letter")?;
        let _held = Held::new(&self.holding, 1);
        self.handle_dead(timeouts, d, stop).await
    }

    /// A delivery and its order batch (`None`: not an order batch, poison).
    fn parse(&self, d: Delivery) -> Received {
        let batch = serde_json::from_slice::<OrderBatch>(&d.data)
            .map_err(|e| tracing::error!(error = %e, bytes = d.data.len(), "poison message; dead-lettering it"))
            .ok();
        Received(d, batch)
    }
}

/// Starts consuming `queue` on `channel` (`what` names the step in the error).
async fn consume(channel: &Channel, queue: String, what: &'static str) -> Result<Consumer> {
    channel
        .basic_consume(
            queue.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .context(what)
}

/// Waits for every batch in flight; the first failure among them goes to
/// `failure` unless one is there already.
async fn finish<F: Future<Output = Result<()>>>(
    running: &mut FuturesUnordered<F>,
    failure: &mut Option<anyhow::Error>,
) {
    while let Some(done) = running.next().await {
        if let Err(e) = done {
            failure.get_or_insert(e);
        }
    }
}
