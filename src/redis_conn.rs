//! A Redis handle that knows which server it talks to.
//!
//! Redis can go back in time: a restart from an older snapshot, an AOF written with
//! `appendfsync everysec`, a failover to a replica that missed the last writes. Each
//! of these is a *new server process*, so it can only be reached over a new TCP
//! connection. This handle therefore never reconnects behind its callers' backs (as
//! redis-rs's `ConnectionManager` does): a connection that failed is marked broken,
//! the next caller opens a new one, and before anyone uses it the handle reads the
//! server's `run_id`. [`Identity`] records which server (run id) the service has
//! verified and repaired, and for which epoch (see [`crate::epoch`]); callers that
//! must not touch an unrepaired server ([`Redis::verified`]) get the connection
//! together with the epoch it was verified for, or nothing.
//!
//! Every command has a response deadline. The connection is always made on the
//! runtime that created the handle (the main one): actix-web runs each HTTP worker
//! on a runtime of its own, and a connection born there would die with that worker
//! when the server stops, while the relay and worker still need it.
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Client, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::{Mutex, Notify};

/// What this process knows about the Redis server it may sell from.
#[derive(Default)]
pub struct Identity {
    state: RwLock<Option<Verified>>,
    /// Woken when a connection met a server other than the verified one, or a caller
    /// saw a sign of lost state: the epoch guard checks at once.
    pub suspect: Notify,
}

/// The server `run_id` whose state Postgres vouches for, at `epoch`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    pub run_id: Arc<str>,
    pub epoch: i64,
    /// The epoch is recorded for this server, but its sales are still being
    /// repaired: counters (whose keys carry the epoch) may be used, sales may not.
    pub repairing: bool,
}

impl Identity {
    pub fn get(&self) -> Option<Verified> {
        self.state.read().expect("identity poisoned").clone()
    }

    pub fn set(&self, v: Option<Verified>) {
        *self.state.write().expect("identity poisoned") = v;
    }

    /// Forget the verification (something is wrong) and wake the guard.
    pub fn distrust(&self) {
        self.set(None);
        self.suspect.notify_one();
    }
}

#[derive(Clone)]
pub struct Redis {
    client: Client,
    /// The current connection: read on every command (a read lock, no await).
    slot: Arc<RwLock<Option<Conn>>>,
    /// Held while a new connection is made, so that callers make one, not many.
    connecting: Arc<Mutex<()>>,
    identity: Arc<Identity>,
    timeout: Duration,
    main_runtime: Option<Handle>,
}

/// One connection to one server process. Commands that fail because the
/// connection is gone (or the server stopped being a writable master) mark it
/// broken, so that the next caller opens a new one and checks who answers.
#[derive(Clone)]
pub struct Conn {
    inner: MultiplexedConnection,
    broken: Arc<AtomicBool>,
    run_id: Arc<str>,
}

impl Conn {
    /// The `run_id` of the server process behind this connection.
    pub fn run_id(&self) -> &Arc<str> {
        &self.run_id
    }

    fn watch<T>(&self, r: RedisResult<T>) -> RedisResult<T> {
        if let Err(e) = &r {
            if is_fatal(e) {
                self.broken.store(true, Ordering::Release);
            }
        }
        r
    }
}

/// Errors after which this connection may not be talking to the server we know.
fn is_fatal(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            ErrorKind::ReadOnly | ErrorKind::MasterDown | ErrorKind::BusyLoadingError
        )
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let r = self.inner.req_packed_command(cmd).await;
            self.watch(r)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let r = self.inner.req_packed_commands(cmd, offset, count).await;
            self.watch(r)
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

impl Redis {
    /// `timeout` bounds connecting and every single command.
    pub fn new(url: &str, timeout: Duration) -> RedisResult<Self> {
        Ok(Self {
            client: Client::open(url)?,
            slot: Arc::new(RwLock::new(None)),
            connecting: Arc::new(Mutex::new(())),
            identity: Arc::new(Identity::default()),
            timeout,
            main_runtime: Handle::try_current().ok(),
        })
    }

    /// A handle on the same server with its own connection and deadline, for
    /// blocking commands (XREADGROUP BLOCK) that must not stall other callers. It
    /// shares the server identity with this handle.
    pub fn dedicated(&self, timeout: Duration) -> Self {
        Self {
            client: self.client.clone(),
            slot: Arc::new(RwLock::new(None)),
            connecting: Arc::new(Mutex::new(())),
            identity: self.identity.clone(),
            timeout,
            main_runtime: self.main_runtime.clone(),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn identity(&self) -> &Arc<Identity> {
        &self.identity
    }

    /// The connection (cheap to clone; commands are pipelined on it), whatever the
    /// server's state. For code that is safe on any server (health checks, the
    /// repair itself, reads).
    pub async fn conn(&self) -> Result<Conn, RedisError> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let _connecting = self.connecting.lock().await;
        // Someone else may have connected while we waited.
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let c = self.connect().await?;
        if self.identity.get().is_some_and(|v| v.run_id != c.run_id) {
            // Another server process: until the epoch guard has checked it against
            // Postgres, nothing may sell from it.
            tracing::warn!(run_id = %c.run_id, "connected to a Redis server other than the verified one");
            self.identity.distrust();
        }
        *self.slot.write().expect("redis slot poisoned") = Some(c.clone());
        Ok(c)
    }

    /// The connection in use, unless it broke.
    fn current(&self) -> Option<Conn> {
        let slot = self.slot.read().expect("redis slot poisoned");
        slot.as_ref().filter(|c| !c.broken.load(Ordering::Acquire)).cloned()
    }

    /// The connection and the epoch it is verified for, if this server's state is
    /// repaired and vouched for by Postgres; `None` while it is not (answer 503).
    pub async fn verified(&self) -> Result<Option<(Conn, i64)>, RedisError> {
        let c = self.conn().await?;
        Ok(match self.identity.get() {
            Some(v) if !v.repairing && v.run_id == c.run_id => Some((c, v.epoch)),
            _ => None,
        })
    }

    /// Like [`Redis::verified`], but also during a repair: for counters, whose keys
    /// carry the epoch, so that values issued by a server that went back are never
    /// issued again.
    pub async fn for_counters(&self) -> Result<Option<(Conn, i64)>, RedisError> {
        let c = self.conn().await?;
        Ok(match self.identity.get() {
            Some(v) if v.run_id == c.run_id => Some((c, v.epoch)),
            _ => None,
        })
    }

    async fn connect(&self) -> Result<Conn, RedisError> {
        let (client, timeout) = (self.client.clone(), self.timeout);
        let connect = async move {
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(timeout)
                .set_response_timeout(timeout);
            let mut inner = client.get_multiplexed_async_connection_with_config(&config).await?;
            let info: String = redis::cmd("INFO").arg("server").query_async(&mut inner).await?;
            let run_id = info
                .lines()
                .find_map(|l| l.strip_prefix("run_id:"))
                .map(|s| s.trim().to_owned())
                .ok_or_else(|| RedisError::from((ErrorKind::ResponseError, "INFO server has no run_id")))?;
            Ok(Conn {
                inner,
                broken: Arc::new(AtomicBool::new(false)),
                run_id: run_id.into(),
            })
        };
        match &self.main_runtime {
            Some(h) => h
                .spawn(connect)
                .await
                .map_err(|e| RedisError::from(std::io::Error::other(e)))?,
            None => connect.await,
        }
    }
}
