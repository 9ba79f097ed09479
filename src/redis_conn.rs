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
//! Every command has a response deadline. The connection is made on the runtime
//! that created the handle (the main one): actix-web runs each HTTP worker on a
//! runtime of its own, and a connection born there would die with that worker when
//! the server stops, while the relay and worker still need it. The one exception
//! is [`Redis::on_this_thread`], the order path's handle per HTTP worker thread.
use redis::cluster::ClusterClient;
use redis::{AsyncConnectionConfig, Client, ErrorKind, RedisError, RedisResult};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::Mutex;

mod cluster_identity;
mod cluster_map;
mod conn;
mod identity;
mod masters;
mod routing;
mod run_id;
mod verdict;
pub use cluster_map::MasterSlots;
pub use conn::Conn;
use conn::Link;
pub use identity::{Identity, Verified};
pub use masters::MasterFacts;
pub use verdict::{breaks_connection, is_transient};

#[derive(Clone)]
pub struct Redis {
    /// One node, or with `cluster` the first seed node (pub/sub goes to any node of a
    /// cluster: a PUBLISH reaches the subscribers of every node).
    client: Client,
    /// The seed nodes of a Redis Cluster (`SECKILL_REDIS_CLUSTER=true`).
    cluster: Option<ClusterClient>,
    seeds: Arc<[Client]>,
    /// The seed nodes' URLs, to build a cluster client per handle (its deadline).
    seed_urls: Arc<[String]>,
    /// The current connection: read on every command (a read lock, no await).
    slot: Arc<RwLock<Option<Conn>>>,
    /// Held while a new connection is made, so that callers make one, not many.
    connecting: Arc<Mutex<()>>,
    identity: Arc<Identity>,
    /// What was read of a cluster's masters, shared like `identity`.
    masters: Arc<cluster_identity::Masters>,
    timeout: Duration,
    main_runtime: Option<Handle>,
}

/// A cluster client that never retries or follows a redirect by itself: a moved
/// slot or a lost node is an error its caller sees, so that the handle connects
/// anew and checks which masters it talks to (a promoted replica may have missed
/// writes) instead of being carried over to them silently.
fn cluster_client(urls: &[String], timeout: Duration) -> RedisResult<ClusterClient> {
    ClusterClient::builder(urls.iter().map(String::as_str))
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .retries(0)
        .build()
}

impl Redis {
    /// `timeout` bounds connecting and every single command. With `cluster`, `url`
    /// is a comma-separated list of seed nodes of a Redis Cluster.
    pub fn new(url: &str, cluster: bool, timeout: Duration) -> RedisResult<Self> {
        let urls: Vec<&str> = url.split(',').map(str::trim).filter(|u| !u.is_empty()).collect();
        if urls.len() > 1 && !cluster {
            return Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "REDIS_URL lists several nodes: set SECKILL_REDIS_CLUSTER=true for a Redis Cluster",
            )));
        }
        let seeds: Vec<Client> = urls.iter().map(|u| Client::open(*u)).collect::<RedisResult<_>>()?;
        let Some(client) = seeds.first().cloned() else {
            return Err(RedisError::from((ErrorKind::InvalidClientConfig, "REDIS_URL is empty")));
        };
        let seed_urls: Arc<[String]> = urls.iter().map(|u| u.to_string()).collect();
        let cluster = if cluster {
            Some(cluster_client(&seed_urls, timeout)?)
        } else {
            None
        };
        Ok(Self {
            client,
            cluster,
            seeds: seeds.into(),
            seed_urls,
            slot: Arc::new(RwLock::new(None)),
            connecting: Arc::new(Mutex::new(())),
            identity: Arc::new(Identity::default()),
            masters: Arc::default(),
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
            // A cluster client carries its deadline: one of this handle's own.
            cluster: self
                .cluster
                .as_ref()
                .map(|c| cluster_client(&self.seed_urls, timeout).unwrap_or_else(|_| c.clone())),
            seeds: self.seeds.clone(),
            seed_urls: self.seed_urls.clone(),
            slot: Arc::new(RwLock::new(None)),
            connecting: Arc::new(Mutex::new(())),
            identity: self.identity.clone(),
            masters: self.masters.clone(),
            timeout,
            main_runtime: self.main_runtime.clone(),
        }
    }

    /// A handle on the same server whose connection is made on, and driven by, the
    /// runtime of the calling thread: the order path uses one per HTTP worker
    /// thread, so that a command and its answer never cross to another thread (two
    /// wake-ups and context switches per order). Its connection ends with that
    /// runtime, so only that thread's tasks may use it.
    pub fn on_this_thread(&self) -> Self {
        let mut h = self.dedicated(self.timeout);
        h.main_runtime = Handle::try_current().ok();
        h
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// A pub/sub connection: to the node, or to the first seed of a cluster that
    /// answers (a PUBLISH on any node of a cluster reaches every node's subscribers).
    pub async fn pubsub(&self) -> RedisResult<redis::aio::PubSub> {
        let mut last = None;
        for seed in self.seeds.iter() {
            match seed.get_async_pubsub().await {
                Ok(p) => return Ok(p),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| RedisError::from((ErrorKind::InvalidClientConfig, "no Redis node"))))
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

    /// The connection, made anew if it predates the identity the guard verified
    /// since: handles that share an identity ([`Redis::dedicated`]) each hold a
    /// connection, and the guard checks (and drops) only its own. A cluster client
    /// follows a failover within one connection, so without this a handle would
    /// keep one stamped with the old masters and never be verified again.
    async fn current_conn(&self) -> Result<Conn, RedisError> {
        let c = self.conn().await?;
        match self.identity.get() {
            Some(v) if v.run_id != c.run_id => {
                c.broken.store(true, Ordering::Release);
                self.conn().await
            }
            _ => Ok(c),
        }
    }

    /// The connection in use, unless it broke, or it refuses the slots of masters
    /// that did not answer and the masters that answer changed since (it would
    /// refuse a master that answers again forever).
    fn current(&self) -> Option<Conn> {
        let slot = self.slot.read().expect("redis slot poisoned");
        slot.as_ref()
            .filter(|c| !c.broken.load(Ordering::Acquire))
            .filter(|c| c.refused.is_empty() || c.generation == self.masters.generation())
            .cloned()
    }

    /// The connection and the epoch it is verified for, if this server's state is
    /// repaired and vouched for by Postgres; `None` while it is not (answer 503).
    pub async fn verified(&self) -> Result<Option<(Conn, i64)>, RedisError> {
        let c = self.current_conn().await?;
        Ok(match self.identity.get() {
            Some(v) if !v.repairing && v.run_id == c.run_id => Some((c, v.epoch)),
            _ => None,
        })
    }

    /// Like [`Redis::verified`], for one sale: also during a repair that does not
    /// touch it.
    pub async fn verified_for(&self, voucher: i64) -> Result<Option<(Conn, i64)>, RedisError> {
        let c = self.current_conn().await?;
        Ok(match self.identity.get() {
            Some(v) if v.sells(voucher) && v.run_id == c.run_id => Some((c, v.epoch)),
            _ => None,
        })
    }

    /// Like [`Redis::verified`], but also during a repair: the connection, the
    /// epoch, and the sales under repair (`None` when none is; a scope of every
    /// sale when every sale is). For a caller that serves many sales at once.
    pub async fn serving(&self) -> Result<Option<(Conn, i64, Option<Verified>)>, RedisError> {
        let c = self.current_conn().await?;
        Ok(match self.identity.get() {
            Some(v) if v.run_id == c.run_id => {
                let epoch = v.epoch;
                Some((c, epoch, v.repairing.then_some(v)))
            }
            _ => None,
        })
    }

    /// Like [`Redis::verified`], but also during a repair: for counters, whose keys
    /// carry the epoch, so that values issued by a server that went back are never
    /// issued again.
    pub async fn for_counters(&self) -> Result<Option<(Conn, i64)>, RedisError> {
        let c = self.current_conn().await?;
        Ok(match self.identity.get() {
            Some(v) if v.run_id == c.run_id => Some((c, v.epoch)),
            _ => None,
        })
    }

    async fn connect(&self) -> Result<Conn, RedisError> {
        let (client, cluster, timeout) = (self.client.clone(), self.cluster.clone(), self.timeout);
        let masters = self.masters.clone();
        let connect = async move {
            if let Some(cluster) = cluster {
                let mut inner = cluster.get_async_connection().await?;
                let reading = cluster_identity::read(&mut inner, &masters).await?;
                return Ok(Conn {
                    inner: Link::Cluster(inner),
                    broken: Arc::new(AtomicBool::new(false)),
                    run_id: reading.identity.into(),
                    refused: reading.unreachable.into(),
                    generation: reading.generation,
                });
            }
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout));
            let mut inner = client.get_multiplexed_async_connection_with_config(&config).await?;
            // Who answers, and whether it is a master: a replica (a master demoted
            // by a failover or `REPLICAOF`) refuses writes, so the handle refuses
            // it (503) until it is a master again.
            let (info, replication): (String, String) = redis::pipe()
                .cmd("INFO")
                .arg("server")
                .cmd("INFO")
                .arg("replication")
                .query_async(&mut inner)
                .await?;
            verdict::must_be_master(&replication)?;
            let run_id = run_id::run_id_of(&info)?;
            Ok(Conn {
                inner: Link::Node(inner),
                broken: Arc::new(AtomicBool::new(false)),
                run_id: run_id.into(),
                refused: Arc::new([]),
                generation: 0,
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

    /// The identity of the servers behind this handle as they are now: the node's
    /// `run_id`, or the sorted `run_id/master_replid` of every master of a cluster
    /// (a master that does not answer counted as last read, see
    /// [`cluster_identity`]). The epoch guard compares it with the connection's each
    /// second: a cluster client follows a failover by itself, so only this check
    /// notices that a master is now another process (a replica that may have
    /// missed writes). A change also forgets the verification at once: nothing
    /// sells from the changed masters until the guard has checked them, even if
    /// the rest of its check cannot be done (a master that does not answer).
    pub async fn current_identity(&self) -> Result<Arc<str>, RedisError> {
        let mut c = self.conn().await?;
        if !c.refused.is_empty() {
            // It cannot reach the masters it refuses, so it would not see them
            // answer again: read through a new connection.
            c.broken.store(true, Ordering::Release);
            c = self.conn().await?;
        }
        match c.inner.clone() {
            Link::Node(_) => Ok(c.run_id.clone()),
            Link::Cluster(mut inner) => {
                let reading = c.watch(cluster_identity::read(&mut inner, &self.masters).await, |_| false)?;
                let now: Arc<str> = reading.identity.into();
                if now != c.run_id {
                    // The masters changed under this connection: the next caller
                    // opens a new one, which carries (and is checked for) the new
                    // identity.
                    tracing::warn!(was = %c.run_id, now = %now, "the masters of the Redis Cluster changed");
                    c.broken.store(true, Ordering::Release);
                }
                if self.identity.get().is_some_and(|v| v.run_id != now) {
                    self.identity.set(None);
                }
                Ok(now)
            }
        }
    }
}

impl Redis {
    /// Every master's identity (`run_id/master_replid`) with its slot ranges, read
    /// from each master; `None` on a single node (it has no slots: a change of it
    /// is a change of every sale).
    pub async fn masters_by_slot(&self) -> Result<Option<Vec<MasterSlots>>, RedisError> {
        let c = self.conn().await?;
        match c.inner.clone() {
            Link::Node(_) => Ok(None),
            Link::Cluster(mut inner) => Ok(Some(c.watch(cluster_map::by_master(&mut inner).await, |_| false)?)),
        }
    }
}
