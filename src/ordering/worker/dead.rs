//! Messages the worker cannot persist as usual: one the database refuses as such
//! (its orders are stored `failed`), and what RabbitMQ dead-lettered.
use super::persist;
use super::setup::Worker;
use crate::broker::answered;
use crate::ordering::model::OrderBatch;
use anyhow::{Context, Result};
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicNackOptions};
use lapin::Channel;
use tokio_util::sync::CancellationToken;

impl Worker {
    /// A message the database refuses as such: its orders are stored `failed` with
    /// the reason (an incident), then it is acknowledged. Requeued if even that fails.
    pub(super) async fn store_refused(
        &self,
        d: &Delivery,
        orders: &[crate::ordering::OrderMsg],
        e: &persist::PersistError,
    ) -> Result<()> {
        if let persist::PersistError::Unsettled(n) = e {
            return self.keep_unsettled(d, orders, *n).await;
        }
        let reason = format!("the database refused the order's message: {e}");
        match persist::store_failed(&self.ctx.pg, orders, &reason).await {
            Ok(n) => {
                tracing::error!(error = %e, orders = orders.len(), stored = n, "INCIDENT: an order message was refused; its orders are stored as failed");
                for o in orders {
                    tracing::error!(
                        order_id = o.id.get(),
                        user_id = o.user_id.get(),
                        voucher_id = o.voucher_id.get(),
                        "INCIDENT: an order of a refused message is stored as failed"
                    );
                }
                self.metrics
                    .orders_persisted
                    .with_label_values(&["failed"])
                    .inc_by(n as u64);
                self.metrics
                    .worker_incidents
                    .with_label_values(&["failed"])
                    .inc_by(n as u64);
                let ack = d.ack(BasicAckOptions::default());
                answered(self.broker.timeout(), "acknowledging a refused message", ack).await?;
            }
            Err(store) => {
                tracing::error!(error = %e, store_error = %store, "an order message was refused and could not be stored as failed; requeueing it");
                let nack = d.nack(BasicNackOptions {
                    requeue: true,
                    multiple: false,
                });
                answered(self.broker.timeout(), "handing a refused message back", nack).await?;
            }
        }
        Ok(())
    }

    /// A message whose conflicts did not settle: nothing of it is stored (its relay
    /// intent stays, so a repair still counts its orders in flight); the message is
    /// kept in `dead_letters` for people, an incident naming its orders, then
    /// taken off the queue (every delivery would fail the same way).
    async fn keep_unsettled(&self, d: &Delivery, orders: &[crate::ordering::OrderMsg], n: usize) -> Result<()> {
        sqlx::query("INSERT INTO dead_letters (body, reason) VALUES ($1, $2)")
            .bind(&d.data[..])
            .bind(format!(
                "{n} order(s) whose conflicts did not settle: nothing of the message is stored"
            ))
            .execute(&self.ctx.pg)
            .await
            .context("keeping a message whose conflicts did not settle")?;
        self.metrics
            .worker_incidents
            .with_label_values(&["unsettled_conflicts"])
            .inc();
        for o in orders {
            tracing::error!(
                order_id = o.id.get(),
                user_id = o.user_id.get(),
                voucher_id = o.voucher_id.get(),
                "INCIDENT: an order of a message whose conflicts did not settle is kept in dead_letters, not stored"
            );
        }
        let ack = d.ack(BasicAckOptions::default());
        answered(self.broker.timeout(), "taking a kept message off the queue", ack).await?;
        Ok(())
    }

    /// A message from the dead-letter queue: an order batch is persisted like any
    /// other; anything else is kept in `dead_letters`.
    pub(super) async fn handle_dead(&self, timeouts: &Channel, d: Delivery, stop: &CancellationToken) -> Result<()> {
        match serde_json::from_slice::<OrderBatch>(&d.data) {
            Ok(b) => {
                tracing::warn!(
                    orders = b.orders.len(),
                    "INCIDENT: an order message was dead-lettered (its delivery limit used up); persisting it from there"
                );
                self.metrics
                    .worker_incidents
                    .with_label_values(&["dead_lettered"])
                    .inc();
                self.settle_one(timeouts, &d, &b, stop).await
            }
            Err(e) => {
                sqlx::query("INSERT INTO dead_letters (body, reason) VALUES ($1, $2)")
                    .bind(&d.data[..])
                    .bind(format!("not an order batch: {e}"))
                    .execute(&self.ctx.pg)
                    .await
                    .context("keeping a dead letter")?;
                let ack = d.ack(BasicAckOptions::default());
                answered(self.broker.timeout(), "acknowledging a dead letter", ack).await?;
                Ok(())
            }
        }
    }
}
