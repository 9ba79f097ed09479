//! The orders queue: its arguments, and the upgrade of a queue that an older
//! version declared with other arguments.
//!
//! Dead-lettering is *at least once*: a quorum queue by default dead-letters at
//! most once (the message leaves the queue before the dead-letter exchange has
//! it, and is gone if that fails, e.g. while the dead-letter queue is down or
//! its node is lost). With `x-dead-letter-strategy: at-least-once` the queue keeps
//! the message until the dead-letter queue confirms it; RabbitMQ requires
//! `x-overflow: reject-publish` for it (no length limit is set, so nothing is
//! ever rejected for length).
//!
//! RabbitMQ refuses to re-declare an existing queue with other arguments
//! (`PRECONDITION_FAILED`), and a queue's arguments cannot be changed. A queue
//! declared by an older version (without these two arguments) is therefore
//! replaced only when that loses nothing: it is first unbound from the orders
//! exchange (a relay's publish then comes back unroutable, `mandatory`, and its
//! orders stay in the outbox), then, only if it holds no message and has no
//! consumer (so no delivery unacknowledged either), deleted and declared anew
//! (`declare` binds it again). Quorum queues support neither `if-empty` nor
//! `if-unused` on delete, hence the unbinding: nothing can enter the queue between
//! the check and the delete, unless a process of the older version connects in
//! that moment and binds it again. Otherwise the queue is bound again and the
//! declaration fails with an error that says what to do: stop the older version's
//! `serve` processes (the relays; orders wait in Redis's outboxes), let its
//! workers empty the queue, stop them, then start this version.
use anyhow::{Context, Result};
use lapin::options::{QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::Connection;

/// The orders queue's arguments.
pub fn arguments(dead_exchange: &str, delivery_limit: u32) -> FieldTable {
    let mut args = FieldTable::default();
    let text = |s: &str| AMQPValue::LongString(LongString::from(s));
    // Quorum: replicated and fsynced, faster than a durable classic queue for
    // confirmed persistent messages, and it counts deliveries (x-delivery-count).
    args.insert(ShortString::from("x-queue-type"), text("quorum"));
    // A message redelivered this often (a batch the database keeps refusing) is
    // dead-lettered instead of being retried forever.
    args.insert(
        ShortString::from("x-delivery-limit"),
        AMQPValue::LongLongInt(delivery_limit as i64),
    );
    args.insert(ShortString::from("x-dead-letter-exchange"), text(dead_exchange));
    // Dead-lettered at least once: kept until the dead-letter queue has it.
    args.insert(ShortString::from("x-dead-letter-strategy"), text("at-least-once"));
    args.insert(ShortString::from("x-overflow"), text("reject-publish"));
    args
}

/// Declares the orders queue `name` with `args` on a channel of its own (a refused
/// declaration closes its channel), replacing an older version's queue (bound to
/// `exchange` with `routing_key`) when it is empty and unused.
pub async fn declare(conn: &Connection, name: &str, exchange: &str, routing_key: &str, args: FieldTable) -> Result<()> {
    let opts = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    let ch = conn.create_channel().await.context("opening an AMQP channel")?;
    let first = ch.queue_declare(name.into(), opts, args.clone()).await;
    let Err(e) = first else {
        let _ = ch.close(200, "declared".into()).await;
        return Ok(());
    };
    if !precondition_failed(&e) {
        return Err(e).context("declaring the orders queue");
    }
    tracing::warn!(
        queue = name,
        "the orders queue exists with an older version's arguments: replacing it if it is empty and unused"
    );
    let ch = conn.create_channel().await.context("opening an AMQP channel")?;
    // Nothing enters it from now on (see the module's doc).
    ch.queue_unbind(name.into(), exchange.into(), routing_key.into(), FieldTable::default())
        .await
        .context("unbinding the older orders queue")?;
    let passive = QueueDeclareOptions { passive: true, ..opts };
    let now = ch
        .queue_declare(name.into(), passive, FieldTable::default())
        .await
        .context("reading the older orders queue")?;
    let (messages, consumers) = (now.message_count(), now.consumer_count());
    if messages > 0 || consumers > 0 {
        // Back as it was: the older version's relays and workers carry on.
        ch.queue_bind(
            name.into(),
            exchange.into(),
            routing_key.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .context("binding the older orders queue again")?;
        anyhow::bail!(
            "the orders queue {name} was declared by an older version of seckill (no at-least-once \
             dead-lettering) and still holds messages or has consumers ({messages} ready, {consumers} \
             consumers); it is replaced only once empty and unused, so that no order is lost: stop the \
             older version's `serve` processes, let its workers empty the queue, stop them, then start \
             this version (see docs/ARCHITECTURE.md)"
        );
    }
    ch.queue_delete(name.into(), Default::default())
        .await
        .context("deleting the older orders queue")?;
    ch.queue_declare(name.into(), opts, args)
        .await
        .context("declaring the orders queue anew")?;
    let _ = ch.close(200, "declared".into()).await;
    tracing::warn!(
        queue = name,
        "the orders queue was replaced: dead-lettering is at least once"
    );
    Ok(())
}

/// RabbitMQ's 406 PRECONDITION_FAILED (a declaration that does not match, a
/// delete refused by `if-empty` / `if-unused`).
fn precondition_failed(e: &lapin::Error) -> bool {
    matches!(e.kind(), lapin::ErrorKind::ProtocolError(p) if p.get_id() == 406)
}

/// Ready messages in the queue `name`, by a passive declare on `ch`.
pub async fn ready(ch: &lapin::Channel, name: &str) -> Result<i64> {
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    let q = ch
        .queue_declare(name.into(), passive, FieldTable::default())
        .await
        .context("reading the orders queue depth")?;
    Ok(q.message_count() as i64)
}
