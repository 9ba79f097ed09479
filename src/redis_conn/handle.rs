//! The handle itself ([`Redis`]): the servers it is for, the connection it holds,
//! and the handles made from it that share its identity (see the module above).
use super::cluster_identity;
use super::conn::Conn;
use redis::cluster::ClusterClient;
use redis::{Client, ErrorKind, RedisError, RedisResult};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::Mutex;

#[derive(Clone)]
pub struct Redis {
    /// One node, or with `cluster` the first seed node (pub/sub goes to any node of a
    /// cluster: a PUBLISH reaches the subscribers of every node).
    pub(super) client: Client,
    /// The seed nodes of a Redis Cluster (`SECKILL_REDIS_CLUSTER=true`).
    pub(super) cluster: Option<ClusterClient>,
    seeds: Arc<[Client]>,
    /// The seed nodes' URLs, to build a cluster client per handle (its deadline).
    seed_urls: Arc<[String]>,
    /// The current connection: read on every command (a read lock, no await).
    pub(super) slot: Arc<RwLock<Option<Conn>>>,
    /// Held while a new connection is made, so that callers make one, not many.
    pub(super) connecting: Arc<Mutex<()>>,
    /// What was read of a cluster's masters, shared by the handles made from one.
    pub(super) masters: Arc<cluster_identity::Masters>,
    pub(super) timeout: Duration,
    pub(super) main_runtime: Option<Handle>,
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
            masters: Arc::default(),
            timeout,
            main_runtime: Handle::try_current().ok(),
        })
    }

    /// A handle on the same server with its own connection and deadline, for
    /// blocking commands (XREADGROUP BLOCK) that must not stall other callers.
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
}
