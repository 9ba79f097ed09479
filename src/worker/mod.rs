//! The order worker: consumes order batches from RabbitMQ with manual acks and a
//! prefetch window, persists what has arrived in one transaction
//! ([`persist::persist`]), and acknowledges only after the commit.
//!
//! - A message that is not an order batch (poison) is rejected without requeue and
//!   dead-lettered at once.
//! - While Postgres is down the worker retries the same batch with backoff (no hot
//!   loop), holding its messages unacknowledged; on shutdown they go back to the queue.
//! - A batch the database refuses as such is retried message by message; a message
//!   that still fails is requeued, and after the queue's delivery limit RabbitMQ
//!   dead-letters it.
pub mod persist;
pub mod timeout;

use crate::broker::Broker;
use crate::order::model::OrderBatch;
use crate::sequence::Sequences;
use anyhow::{Context, Result};
use futures::{FutureExt, StreamExt};
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions, BasicRejectOptions};
use lapin::types::FieldTable;
use lapin::Channel;
use persist::Outcome;
use sqlx::PgPool;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub struct Worker {
    pg: PgPool,
    sequences: Sequences,
    broker: Arc<Broker>,
    prefetch: u16,
    batch: usize,
    payment_window: Duration,
    metrics: Arc<crate::metrics::Metrics>,
}

impl Worker {
    pub fn new(
        pg: PgPool,
        sequences: Sequences,
        broker: Arc<Broker>,
        settings: &crate::config::Settings,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        Self {
            pg,
            sequences,
            broker,
            prefetch: settings.worker_prefetch,
            batch: settings.worker_batch,
            payment_window: settings.payment_window,
            metrics,
        }
    }

    /// Consumes until `stop`, reconnecting after failures.
    pub async fn run(&self, stop: CancellationToken) {
        crate::supervise::supervise("worker", &stop, || self.run_connected(&stop)).await
    }

    async fn run_connected(&self, stop: &CancellationToken) -> Result<()> {
        let (conn, channel) = self.broker.open().await?;
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
                &self.broker.keys().orders_queue(),
                "",
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .context("starting to consume orders")?;
        tracing::info!("worker consuming");
        loop {
            let first = tokio::select! {
                _ = stop.cancelled() => break,
                d = consumer.next() => d,
            };
            let mut deliveries = vec![first.context("the consumer ended")?.context("receiving a delivery")?];
            // Whatever else has already arrived joins this batch; nothing waits for more.
            while deliveries.len() < self.prefetch as usize {
                match consumer.next().now_or_never() {
                    Some(Some(Ok(d))) => deliveries.push(d),
                    _ => break,
                }
            }
            self.handle(&timeouts, deliveries, stop).await?;
        }
        // Unacknowledged deliveries return to the queue when the channel closes.
        let _ = conn.close(200, "worker stopping").await;
        Ok(())
    }

    /// Persists the orders of `deliveries` and settles each delivery.
    pub async fn handle(&self, timeouts: &Channel, deliveries: Vec<Delivery>, stop: &CancellationToken) -> Result<()> {
        let mut good: Vec<(Delivery, OrderBatch)> = Vec::new();
        for d in deliveries {
            match serde_json::from_slice::<OrderBatch>(&d.data) {
                Ok(b) => good.push((d, b)),
                Err(e) => {
                    tracing::error!(error = %e, bytes = d.data.len(), "poison message; dead-lettering it");
                    self.metrics.worker_poison.inc();
                    d.reject(BasicRejectOptions { requeue: false })
                        .await
                        .context("rejecting a poison message")?;
                }
            }
        }
        // Keep transactions to the configured size: split into chunks of whole messages.
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
            match self.persist_retrying(&orders, stop).await {
                Some(Ok(outcome)) => {
                    self.count(outcome);
                    // Scheduled before the ack: a crash in between redelivers the
                    // batch, which schedules them again (the timeout is idempotent).
                    let ids = orders.iter().map(|o| o.id).collect();
                    timeout::schedule(timeouts, &self.broker, self.payment_window, ids).await?;
                    for (d, _) in chunk {
                        d.ack(BasicAckOptions::default())
                            .await
                            .context("acknowledging a batch")?;
                    }
                }
                Some(Err(e)) if chunk.len() > 1 => {
                    tracing::warn!(error = %e, "a batch was refused; persisting its messages one by one");
                    for (d, b) in chunk {
                        self.settle_one(timeouts, d, &b.orders, stop).await?;
                    }
                }
                Some(Err(e)) => {
                    let (d, _) = &chunk[0];
                    tracing::error!(error = %e, "an order message was refused; requeueing it (dead-lettered after the delivery limit)");
                    d.nack(BasicNackOptions {
                        requeue: true,
                        multiple: false,
                    })
                    .await?;
                }
                // Stopping while the database is down: the deliveries go back unacked.
                None => return Ok(()),
            }
            start = end;
        }
        Ok(())
    }

    async fn settle_one(
        &self,
        timeouts: &Channel,
        d: &Delivery,
        orders: &[crate::order::OrderMsg],
        stop: &CancellationToken,
    ) -> Result<()> {
        match self.persist_retrying(orders, stop).await {
            Some(Ok(outcome)) => {
                self.count(outcome);
                let ids = orders.iter().map(|o| o.id).collect();
                timeout::schedule(timeouts, &self.broker, self.payment_window, ids).await?;
                d.ack(BasicAckOptions::default()).await?;
            }
            Some(Err(e)) => {
                tracing::error!(error = %e, "an order message was refused; requeueing it (dead-lettered after the delivery limit)");
                d.nack(BasicNackOptions {
                    requeue: true,
                    multiple: false,
                })
                .await?;
            }
            None => {}
        }
        Ok(())
    }

    /// Retries transient failures with backoff until success, a permanent error,
    /// or `stop` (None).
    async fn persist_retrying(
        &self,
        orders: &[crate::order::OrderMsg],
        stop: &CancellationToken,
    ) -> Option<Result<Outcome, persist::PersistError>> {
        let mut backoff = Duration::from_millis(50);
        loop {
            let timer = self.metrics.worker_persist_seconds.start_timer();
            let result = persist::persist(&self.pg, &self.sequences, orders).await;
            timer.observe_duration();
            match result {
                Err(e) if e.is_transient() => {
                    tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "persisting orders failed; retrying");
                    tokio::select! {
                        _ = stop.cancelled() => return None,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
                other => return Some(other),
            }
        }
    }

    fn count(&self, o: Outcome) {
        self.metrics
            .worker_batch_orders
            .observe((o.created + o.duplicates + o.failed) as f64);
        for (result, n) in [
            ("created", o.created),
            ("duplicate", o.duplicates),
            ("failed", o.failed),
        ] {
            if n > 0 {
                self.metrics
                    .orders_persisted
                    .with_label_values(&[result])
                    .inc_by(n as u64);
            }
        }
    }
}
