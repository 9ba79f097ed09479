//! The topology every (re)connect declares: the orders and dead-letter exchanges
//! and queues, and the exchanges and queues of payment timeouts (see the diagram
//! in [`crate::broker`]).
use super::{Broker, ORDERS_ROUTING_KEY};
use anyhow::{Context, Result};
use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{Channel, ExchangeKind};

impl Broker {
    /// Declares exchanges and queues and binds the orders queue (declared before,
    /// see [`orders_queue`](super::orders_queue)); idempotent, so every (re)connect runs it.
    pub async fn declare(&self, ch: &Channel) -> Result<()> {
        // Durable: the topology survives a broker restart.
        let durable = ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        };
        let queue_opts = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        self.declare_orders(ch, durable, queue_opts).await?;
        self.declare_timeouts(ch, durable, queue_opts).await
    }

    /// The orders exchange and the dead-letter exchange, the orders queue bound,
    /// and the dead-letter queue declared and bound.
    async fn declare_orders(
        &self,
        ch: &Channel,
        durable: ExchangeDeclareOptions,
        queue_opts: QueueDeclareOptions,
    ) -> Result<()> {
        let k = &self.keys;
        ch.exchange_declare(
            k.orders_exchange().into(),
            ExchangeKind::Direct,
            durable,
            FieldTable::default(),
        )
        .await
        .context("declaring the orders exchange")?;
        ch.exchange_declare(
            k.dead_exchange().into(),
            ExchangeKind::Fanout,
            durable,
            FieldTable::default(),
        )
        .await
        .context("declaring the dead-letter exchange")?;
        ch.queue_bind(
            k.orders_queue().into(),
            k.orders_exchange().into(),
            ORDERS_ROUTING_KEY.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .context("binding the orders queue")?;

        // The dead-letter queue is classic: it is read by people, not at speed.
        ch.queue_declare(k.dead_queue().into(), queue_opts, FieldTable::default())
            .await
            .context("declaring the dead-letter queue")?;
        ch.queue_bind(
            k.dead_queue().into(),
            k.dead_exchange().into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .context("binding the dead-letter queue")?;
        Ok(())
    }

    /// The exchange and queues of payment timeouts: the delay queue that
    /// dead-letters expired messages to the timeout exchange, and the timeout queue.
    async fn declare_timeouts(
        &self,
        ch: &Channel,
        durable: ExchangeDeclareOptions,
        queue_opts: QueueDeclareOptions,
    ) -> Result<()> {
        let k = &self.keys;
        // Payment timeouts with RabbitMQ alone (no delayed-message plugin): a message
        // waits in the delay queue, which nobody consumes, until its per-message TTL
        // expires; RabbitMQ then dead-letters it to the timeout exchange. Per-message
        // TTL (not x-message-ttl) so that changing the payment window needs no
        // re-declaration; every message has the same TTL, so expiry stays in order.
        // Classic: quorum queues of this RabbitMQ version do not expire messages.
        ch.exchange_declare(
            k.timeout_exchange().into(),
            ExchangeKind::Fanout,
            durable,
            FieldTable::default(),
        )
        .await
        .context("declaring the timeout exchange")?;
        let mut delay_args = FieldTable::default();
        delay_args.insert(
            ShortString::from("x-dead-letter-exchange"),
            AMQPValue::LongString(LongString::from(k.timeout_exchange())),
        );
        ch.queue_declare(k.delay_queue().into(), queue_opts, delay_args)
            .await
            .context("declaring the delay queue")?;
        ch.queue_declare(k.timeout_queue().into(), queue_opts, FieldTable::default())
            .await
            .context("declaring the timeout queue")?;
        ch.queue_bind(
            k.timeout_queue().into(),
            k.timeout_exchange().into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .context("binding the timeout queue")?;
        Ok(())
    }
}
