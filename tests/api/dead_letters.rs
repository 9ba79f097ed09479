//! The orders queue dead-letters at least once, and a queue an older version
//! declared (other arguments) is replaced only when that loses nothing.
use crate::helpers::*;
use lapin::options::{BasicGetOptions, BasicPublishOptions, ExchangeDeclareOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, ExchangeKind};
use seckill::broker::ORDERS_ROUTING_KEY;

const DURABLE: QueueDeclareOptions = QueueDeclareOptions {
    passive: false,
    durable: true,
    exclusive: false,
    auto_delete: false,
    nowait: false,
};

/// The arguments the orders queue had before dead-lettering was at least once.
fn older_arguments(ns: &Namespace) -> FieldTable {
    let mut args = FieldTable::default();
    let text = |s: &str| AMQPValue::LongString(LongString::from(s));
    args.insert(ShortString::from("x-queue-type"), text("quorum"));
    args.insert(ShortString::from("x-delivery-limit"), AMQPValue::LongLongInt(5));
    args.insert(
        ShortString::from("x-dead-letter-exchange"),
        text(&ns.keys().dead_exchange()),
    );
    args
}

/// An older version's topology: the orders exchange, its queue with the older
/// arguments, bound.
async fn older_topology(ns: &Namespace) {
    let conn = ns.broker().connect().await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    let k = ns.keys();
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.exchange_declare(
        k.orders_exchange().into(),
        ExchangeKind::Direct,
        durable,
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_declare(k.orders_queue().into(), DURABLE, older_arguments(ns))
        .await
        .unwrap();
    ch.queue_bind(
        k.orders_queue().into(),
        k.orders_exchange().into(),
        ORDERS_ROUTING_KEY.into(),
        Default::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let _ = conn.close(200, "older".into()).await;
}

/// Whether the broker accepts declaring the orders queue with `args` (a
/// declaration with other arguments than the queue's is refused).
async fn declares_with(ns: &Namespace, args: FieldTable) -> bool {
    let conn = ns.broker().connect().await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    let ok = ch
        .queue_declare(ns.keys().orders_queue().into(), DURABLE, args)
        .await
        .is_ok();
    let _ = conn.close(200, "checked".into()).await;
    ok
}

/// The orders queue's arguments as the broker holds them (`rabbitmqctl`: RabbitMQ
/// does not compare `x-dead-letter-strategy` when a queue is declared again, so a
/// declaration with it would not prove it is set).
fn queue_arguments(ns: &Namespace) -> String {
    let out = std::process::Command::new("rabbitmqctl")
        .args(["list_queues", "-q", "name", "arguments"])
        .output()
        .expect("rabbitmqctl");
    assert!(out.status.success(), "rabbitmqctl list_queues");
    let queue = ns.keys().orders_queue();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{queue}\t")).map(str::to_owned))
        .unwrap_or_else(|| panic!("no queue {queue}"))
}

fn dead_letters_at_least_once(arguments: &str) -> bool {
    arguments.contains(r#"{"x-dead-letter-strategy","at-least-once"}"#)
        && arguments.contains(r#"{"x-overflow","reject-publish"}"#)
}

/// The service declares `x-dead-letter-strategy: at-least-once` (with the
/// `x-overflow: reject-publish` it needs), and the queue refuses a declaration
/// with the older arguments.
#[tokio::test]
async fn the_orders_queue_dead_letters_at_least_once() {
    let ns = Namespace::new().await;
    let (conn, _ch) = ns.broker().open().await.expect("the topology declared");
    let _ = conn.close(200, "done".into()).await;
    let arguments = queue_arguments(&ns);
    assert!(dead_letters_at_least_once(&arguments), "{arguments}");
    assert!(
        !declares_with(&ns, older_arguments(&ns)).await,
        "the queue does not carry the older arguments"
    );
}

/// An older version's queue that is empty and unused is replaced at start-up.
#[tokio::test]
async fn an_older_versions_empty_queue_is_replaced() {
    let ns = Namespace::new().await;
    older_topology(&ns).await;
    let (conn, _ch) = ns.broker().open().await.expect("the topology declared");
    let _ = conn.close(200, "done".into()).await;
    let arguments = queue_arguments(&ns);
    assert!(dead_letters_at_least_once(&arguments), "replaced: {arguments}");
}

/// An older version's queue that still holds an order batch is kept, message
/// and all, and the declaration says why and what to do; once it is emptied, the
/// next declaration replaces it.
#[tokio::test]
async fn an_older_versions_queue_holding_messages_is_kept_until_drained() {
    let ns = Namespace::new().await;
    older_topology(&ns).await;
    let queue = ns.keys().orders_queue();
    let conn = ns.broker().connect().await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(Default::default()).await.unwrap();
    let publish = |body: &'static [u8]| {
        let (ch, exchange) = (ch.clone(), ns.keys().orders_exchange());
        async move {
            let mandatory = BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            };
            let props = BasicProperties::default().with_delivery_mode(2);
            let confirm = ch.basic_publish(
                exchange.as_str().into(),
                ORDERS_ROUTING_KEY.into(),
                mandatory,
                body,
                props,
            );
            let confirmation = confirm.await.unwrap().await.unwrap();
            assert!(confirmation.take_message().is_none(), "routed to the queue");
        }
    };
    publish(b"an order batch of the older version").await;

    let err = ns.broker().open().await.expect_err("refused while it holds a message");
    let text = format!("{err:#}");
    assert!(text.contains("older version") && text.contains("empty"), "{text}");
    let passive = QueueDeclareOptions {
        passive: true,
        ..DURABLE
    };
    let q = ch
        .queue_declare(queue.as_str().into(), passive, FieldTable::default())
        .await
        .unwrap();
    assert_eq!(q.message_count(), 1, "the message is still there");
    assert!(
        !dead_letters_at_least_once(&queue_arguments(&ns)),
        "the older queue is kept"
    );
    // Bound again as it was: the older version's relays still reach it.
    publish(b"another batch of the older version").await;

    // Its workers empty it: the next start replaces it.
    for expected in [
        &b"an order batch of the older version"[..],
        b"another batch of the older version",
    ] {
        let got = ch
            .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
            .expect("the message");
        assert_eq!(&got.delivery.data[..], expected);
    }
    let _ = conn.close(200, "drained".into()).await;
    let (conn, _ch) = ns.broker().open().await.expect("replaced once empty");
    let _ = conn.close(200, "done".into()).await;
    let arguments = queue_arguments(&ns);
    assert!(dead_letters_at_least_once(&arguments), "replaced: {arguments}");
}
