//! The servers behind a handle as they are now, read anew: their identity, which
//! the epoch guard compares with the connection's, and each master's slots, where
//! a repair places a change.
use super::cluster_identity;
use super::cluster_map::{self, MasterSlots};
use super::conn::Link;
use super::handle::Redis;
use redis::RedisError;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Redis {
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
