//! A Redis handle that connects on first use and reconnects by itself.
//!
//! `ConnectionManager` multiplexes every caller over one connection and reconnects
//! after a failure; connecting lazily lets the process start (and report itself
//! not ready) while Redis is down. Every command has a response deadline.
//!
//! The connection is always made on the runtime that created the handle (the main
//! one): actix-web runs each HTTP worker on a runtime of its own, and a connection
//! born there would die with that worker when the server stops, while the relay
//! and worker still need it to finish their work.
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, RedisError, RedisResult};
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::OnceCell;

#[derive(Clone)]
pub struct Redis {
    client: Client,
    conn: Arc<OnceCell<ConnectionManager>>,
    timeout: Duration,
    home: Option<Handle>,
}

impl Redis {
    /// `timeout` bounds connecting and every single command.
    pub fn new(url: &str, timeout: Duration) -> RedisResult<Self> {
        Ok(Self {
            client: Client::open(url)?,
            conn: Arc::new(OnceCell::new()),
            timeout,
            home: Handle::try_current().ok(),
        })
    }

    /// A handle on the same server with its own connection and deadline, for
    /// blocking commands (XREADGROUP BLOCK) that must not stall other callers.
    pub fn dedicated(&self, timeout: Duration) -> Self {
        Self {
            client: self.client.clone(),
            conn: Arc::new(OnceCell::new()),
            timeout,
            home: self.home.clone(),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The shared connection (cheap to clone; commands are pipelined on it).
    pub async fn conn(&self) -> Result<ConnectionManager, RedisError> {
        if let Some(conn) = self.conn.get() {
            return Ok(conn.clone());
        }
        let timeout = self.timeout;
        let client = self.client.clone();
        let connect = async move {
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(timeout)
                .set_response_timeout(timeout)
                .set_number_of_retries(2)
                .set_max_delay(500);
            ConnectionManager::new_with_config(client, config).await
        };
        let home = self.home.clone();
        self.conn
            .get_or_try_init(|| async move {
                match home {
                    Some(h) => h
                        .spawn(connect)
                        .await
                        .map_err(|e| RedisError::from(std::io::Error::other(e)))?,
                    None => connect.await,
                }
            })
            .await
            .cloned()
    }
}
