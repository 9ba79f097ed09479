//! RabbitMQ: connections and the order topology, all names under the namespace.
//!
//! ```text
//! relay --publish (persistent, mandatory, confirmed)--> <ns>.orders (direct exchange)
//!       --> <ns>.orders (quorum queue) --> worker
//!           rejected, or delivered more than the limit --> <ns>.orders.dlx --> <ns>.orders.dead
//!           (at least once: see `orders_queue`)
//!
//! worker --publish (per-message TTL = payment window)--> <ns>.orders.delay (classic queue,
//!       no consumer) --expired--> <ns>.orders.timeout (fanout) --> <ns>.orders.timeout (queue)
//!       --> timeout consumer
//! ```
use crate::keys::Keys;
use anyhow::{Context, Result};
use lapin::options::BasicPublishOptions;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Mutex;

pub mod orders_queue;
#[cfg(test)]
mod tests;
mod topology;

/// The AMQP heartbeat asked for where `AMQP_URL` names none: a connection that
/// hears nothing from its node for twice this long is closed and made again
/// (RabbitMQ's own default is 60 s; below 5 s it warns of false alarms).
pub const DEFAULT_HEARTBEAT_SECS: u16 = 5;

/// One node's URL, with [`DEFAULT_HEARTBEAT_SECS`] where it names no heartbeat.
fn node_uri(url: &str) -> Result<lapin::uri::AMQPUri> {
    let mut uri: lapin::uri::AMQPUri = url
        .parse()
        // (Checked at start; the parser's message could quote a password.)
        .map_err(|_: String| anyhow::anyhow!("AMQP_URL names a node that is not an AMQP URL"))?;
    uri.query.heartbeat.get_or_insert(DEFAULT_HEARTBEAT_SECS);
    Ok(uri)
}

/// Routing key of order batches.
pub const ORDERS_ROUTING_KEY: &str = "orders";

/// Publishes `body` persistently (delivery mode 2: written to disk by the queue) and
/// `mandatory` (a message no queue takes comes back instead of vanishing), on a
/// channel in confirm mode, and waits for the broker's confirm: `Ok` only once
/// RabbitMQ has taken the message into a queue.
pub async fn publish_confirmed(
    ch: &Channel,
    exchange: &str,
    routing_key: &str,
    body: &[u8],
    props: BasicProperties,
    timeout: Duration,
) -> Result<()> {
    let opts = BasicPublishOptions {
        mandatory: true,
        ..Default::default()
    };
    // The whole of it within `timeout`, sending included: whatever lapin does
    // with a connection whose node went silent (cut off by the network), no
    // part of a publication waits past it, so the caller gives up and moves to
    // a live node.
    let confirmation = tokio::time::timeout(timeout, async {
        let confirm = ch
            .basic_publish(
                exchange.into(),
                routing_key.into(),
                opts,
                body,
                props.with_delivery_mode(2),
            )
            .await
            .context("publishing")?;
        confirm.await.context("waiting for the publisher confirm")
    })
    .await
    .context("no publisher confirm in time")??;
    anyhow::ensure!(confirmation.is_ack(), "RabbitMQ refused the message (nack)");
    anyhow::ensure!(
        confirmation.take_message().is_none(),
        "RabbitMQ returned the message as unroutable"
    );
    Ok(())
}

/// `op`, an answer to a delivery (`ack`, `nack`, `reject`), within `timeout`:
/// like a publication, its send can wait as long as a network cut lasts, and a
/// worker waiting there holds its deliveries and never moves to a live node.
/// On `Err` the caller drops the connection; the broker then delivers the
/// message again (the worker is idempotent).
pub async fn answered<T>(
    timeout: Duration,
    what: &'static str,
    op: impl std::future::Future<Output = lapin::Result<T>>,
) -> Result<T> {
    tokio::time::timeout(timeout, op)
        .await
        .with_context(|| format!("{what}: not sent in time"))?
        .context(what)
}

/// Opens connections to a broker (one node, or any live node of a cluster) and
/// remembers the last one for health checks.
pub struct Broker {
    /// The nodes' addresses, in the order `AMQP_URL` lists them.
    urls: Vec<String>,
    /// The node the last connection reached: the next connection tries it first.
    current: AtomicUsize,
    keys: Keys,
    timeout: Duration,
    delivery_limit: u32,
    health: Mutex<Option<Connection>>,
    main_runtime: Option<tokio::runtime::Handle>,
}

impl Broker {
    /// `url`: one AMQP URL, or a comma-separated list of a cluster's nodes.
    pub fn new(url: &str, keys: Keys, timeout: Duration, delivery_limit: u32) -> Self {
        Self {
            urls: node_urls(url),
            current: AtomicUsize::new(0),
            keys,
            timeout,
            delivery_limit,
            health: Mutex::new(None),
            main_runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// How long a connection, a publication's confirm or an answer to a
    /// delivery may take (the dependency timeout).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// A new connection, each attempt bounded by the dependency timeout: to the
    /// node the last one reached, else to the next listed node that answers (a
    /// cluster's node that died or is cut off is passed over).
    ///
    /// The connection is made on the runtime that created the broker (the main one):
    /// its I/O is bound to that runtime, and one made inside an HTTP handler would
    /// die with that actix worker's runtime when the server stops.
    pub async fn connect(&self) -> Result<Connection> {
        let first = self.current.load(Ordering::Relaxed);
        let mut last_error = None;
        for i in (0..self.urls.len()).map(|k| (first + k) % self.urls.len()) {
            match self.connect_to(&self.urls[i]).await {
                Ok(conn) => {
                    if i != first {
                        tracing::info!(node = i + 1, of = self.urls.len(), "connected to another RabbitMQ node");
                    }
                    self.current.store(i, Ordering::Relaxed);
                    return Ok(conn);
                }
                Err(e) => {
                    if self.urls.len() > 1 {
                        tracing::warn!(node = i + 1, of = self.urls.len(), error = %format!("{e:#}"),
                            "RabbitMQ node not reached; trying the next");
                    }
                    last_error = Some(e);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow::anyhow!("AMQP_URL names no node")))
    }

    /// A connection to one node. Its heartbeat is the URL's `heartbeat`, else
    /// [`DEFAULT_HEARTBEAT_SECS`]: a node cut off by the network (alive, its
    /// packets dropped) sends no close, and a consumer on it would otherwise wait
    /// RabbitMQ's 60 s heartbeat twice over before moving to a live node.
    async fn connect_to(&self, url: &str) -> Result<Connection> {
        let (url, timeout) = (url.to_owned(), self.timeout);
        // Shown by `rabbitmqctl list_connections client_properties`: operators (and
        // the fault tests) can tell deployments apart on a shared broker.
        let name = format!("seckill:{}", self.keys.namespace());
        let connect = async move {
            // lapin's `tokio` feature binds the connection to the current runtime.
            let props = ConnectionProperties::default().with_connection_name(name.into());
            tokio::time::timeout(timeout, Connection::connect_uri(node_uri(&url)?, props))
                .await
                .context("connecting to RabbitMQ timed out")?
                .context("connecting to RabbitMQ")
        };
        match &self.main_runtime {
            Some(main_runtime) => main_runtime
                .spawn(connect)
                .await
                .context("the connecting task failed")?,
            None => connect.await,
        }
    }

    /// A channel on a new connection with the topology declared. The caller keeps
    /// the connection alive for as long as it uses the channel.
    pub async fn open(&self) -> Result<(Connection, Channel)> {
        let conn = self.connect().await?;
        let k = &self.keys;
        let args = orders_queue::arguments(&k.dead_exchange(), self.delivery_limit);
        let (queue, exchange) = (k.orders_queue(), k.orders_exchange());
        orders_queue::declare(&conn, &queue, &exchange, ORDERS_ROUTING_KEY, args).await?;
        let channel = conn.create_channel().await.context("opening an AMQP channel")?;
        self.declare(&channel).await?;
        Ok((conn, channel))
    }

    /// Readiness: keeps one idle connection and checks it answers.
    pub async fn check(&self) -> Result<()> {
        let mut guard = self.health.lock().await;
        if let Some(conn) = guard.as_ref() {
            if conn.status().connected() {
                return Ok(());
            }
        }
        *guard = None;
        let conn = self.connect().await?;
        *guard = Some(conn);
        Ok(())
    }

    /// Closes the health-check connection.
    pub async fn close(&self) {
        if let Some(conn) = self.health.lock().await.take() {
            self.close_conn(&conn, "shutting down").await;
        }
    }

    /// Closes `conn`, waiting for its node's answer no longer than the
    /// dependency timeout: a node cut off by the network never answers, and a
    /// worker that waited for it after a failure held its deliveries and never
    /// moved to a live node (seen: for as long as the cut lasted). Either way
    /// the connection is dropped, and the broker requeues what it held once
    /// it notices.
    pub async fn close_conn(&self, conn: &Connection, reason: &str) {
        let _ = tokio::time::timeout(self.timeout, conn.close(200, reason.into())).await;
    }

    /// Ready messages in the orders queue, on a connection of its own.
    pub async fn orders_ready(&self) -> Result<i64> {
        let (conn, ch) = self.open().await?;
        let ready = orders_queue::ready(&ch, &self.keys.orders_queue()).await;
        self.close_conn(&conn, "read the orders queue depth").await;
        ready
    }

    /// Deletes every queue and exchange of the namespace (test clean-up).
    pub async fn delete_topology(&self) -> Result<()> {
        let conn = self.connect().await?;
        let ch = conn.create_channel().await?;
        let k = &self.keys;
        for q in [k.orders_queue(), k.dead_queue(), k.delay_queue(), k.timeout_queue()] {
            let _ = ch.queue_delete(q.into(), Default::default()).await;
        }
        for e in [k.orders_exchange(), k.dead_exchange(), k.timeout_exchange()] {
            let _ = ch.exchange_delete(e.into(), Default::default()).await;
        }
        self.close_conn(&conn, "bye").await;
        Ok(())
    }
}

/// Closes a channel when dropped (on a task of the runtime, if there is one): a
/// consumer's channel must not outlive the loop that consumes from it, whichever
/// way that loop ends. Closing an already closed channel does nothing.
pub struct CloseOnDrop(Option<Channel>);

impl CloseOnDrop {
    pub fn new(channel: &Channel) -> Self {
        Self(Some(channel.clone()))
    }
}

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        let (Some(ch), Ok(rt)) = (self.0.take(), tokio::runtime::Handle::try_current()) else {
            return;
        };
        rt.spawn(async move {
            if ch.status().connected() {
                let _ = ch.close(200, "consumer done".into()).await;
            }
        });
    }
}

/// The nodes `AMQP_URL` lists.
fn node_urls(list: &str) -> Vec<String> {
    crate::config::comma_list(list)
}
