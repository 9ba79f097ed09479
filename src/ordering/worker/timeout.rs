//! Payment timeouts. After the worker commits a batch, it publishes the batch's
//! order ids to the delay queue with the payment window as the message TTL (before
//! acknowledging the batch: a crash in between redelivers the batch, and it is
//! scheduled again). When the message expires, RabbitMQ routes it to the timeout
//! queue and [`run`] cancels every order of it that is still `created`.
use crate::broker::{answered, publish_confirmed, Broker};
use crate::id::OrderId;
use crate::ordering::lifecycle::{Canceller, Lifecycle};
use anyhow::{Context, Result};
use futures::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions, BasicRejectOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Serialize, Deserialize)]
pub struct TimeoutBatch {
    pub order_ids: Vec<i64>,
}

/// Publishes one delayed message for `order_ids`, confirmed.
pub async fn schedule(ch: &Channel, broker: &Broker, window: Duration, order_ids: Vec<i64>) -> Result<()> {
    let body = serde_json::to_vec(&TimeoutBatch { order_ids })?;
    let props = BasicProperties::default().with_expiration(window.as_millis().to_string().into());
    publish_confirmed(
        ch,
        "",
        &broker.keys().delay_queue(),
        &body,
        props,
        Duration::from_secs(10),
    )
    .await
    .context("scheduling payment timeouts")
}

/// Consumes expired timeouts until `stop`, reconnecting after failures.
pub async fn run(broker: Arc<Broker>, lifecycle: Lifecycle, stop: CancellationToken) {
    crate::supervise::supervise("timeout consumer", &stop, || consume(&broker, &lifecycle, &stop)).await
}

async fn consume(broker: &Broker, lifecycle: &Lifecycle, stop: &CancellationToken) -> Result<()> {
    let (conn, ch) = broker.open().await?;
    let _closes = crate::broker::CloseOnDrop::new(&ch);
    ch.basic_qos(16, BasicQosOptions::default()).await?;
    let mut consumer = ch
        .basic_consume(
            broker.keys().timeout_queue().into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .context("consuming payment timeouts")?;
    loop {
        let d = tokio::select! {
            _ = stop.cancelled() => break,
            d = consumer.next() => d.context("the timeout consumer ended")??,
        };
        let Ok(batch) = serde_json::from_slice::<TimeoutBatch>(&d.data) else {
            tracing::error!(bytes = d.data.len(), "dropping a malformed timeout message");
            let reject = d.reject(BasicRejectOptions { requeue: false });
            answered(broker.timeout(), "rejecting a malformed timeout message", reject).await?;
            continue;
        };
        let mut cancelled = 0;
        for id in batch.order_ids {
            // A failure (Postgres or Redis down) leaves the message unacknowledged:
            // the connection is dropped and the message delivered again later.
            // Every unpaid order its shoppers know by this id: should two share it
            // (ids issued twice), both were admitted in the same second.
            while lifecycle.cancel(OrderId::new(id), Canceller::Timeout).await?.is_some() {
                cancelled += 1;
            }
        }
        if cancelled > 0 {
            tracing::info!(cancelled, "unpaid orders cancelled at the end of their payment window");
        }
        let ack = d.ack(BasicAckOptions::default());
        answered(broker.timeout(), "acknowledging a timeout message", ack).await?;
    }
    broker.close_conn(&conn, "timeout consumer stopping").await;
    Ok(())
}
