//! A Redis handle that connects on first use and reconnects by itself.
//!
//! `ConnectionManager` multiplexes every caller over one connection and reconnects
//! after a failure; connecting lazily lets the process start (and report itself
//! not ready) while Redis is down. Every command has a response deadline.
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, RedisError, RedisResult};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OnceCell;

#[derive(Clone)]
pub struct Redis {
    client: Client,
    conn: Arc<OnceCell<ConnectionManager>>,
    timeout: Duration,
}

impl Redis {
    /// `timeout` bounds connecting and every single command.
    pub fn new(url: &str, timeout: Duration) -> RedisResult<Self> {
        Ok(Self {
            client: Client::open(url)?,
            conn: Arc::new(OnceCell::new()),
            timeout,
        })
    }

    /// A handle on the same server with its own connection and deadline, for
    /// blocking commands (XREADGROUP BLOCK) that must not stall other callers.
    pub fn dedicated(&self, timeout: Duration) -> Self {
        Self {
            client: self.client.clone(),
            conn: Arc::new(OnceCell::new()),
            timeout,
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The shared connection (cheap to clone; commands are pipelined on it).
    pub async fn conn(&self) -> Result<ConnectionManager, RedisError> {
        let timeout = self.timeout;
        let client = self.client.clone();
        self.conn
            .get_or_try_init(|| async move {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(timeout)
                    .set_response_timeout(timeout)
                    .set_number_of_retries(2)
                    .set_max_delay(500);
                ConnectionManager::new_with_config(client, config).await
            })
            .await
            .cloned()
    }
}
