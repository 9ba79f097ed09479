//! The handle's connection: kept while it works, and made anew (on the main
//! runtime) when there is none or it broke, the server that answers read before
//! anyone uses it (see the module above).
use super::conn::{Conn, Link};
use super::handle::Redis;
use super::{cluster_identity, run_id, verdict};
use redis::{AsyncConnectionConfig, RedisError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

impl Redis {
    /// The connection (cheap to clone; commands are pipelined on it).
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
        *self.slot.write().expect("redis slot poisoned") = Some(c.clone());
        Ok(c)
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
}
