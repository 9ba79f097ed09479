//! The servers behind a handle as they are now, read anew: their identity (for
//! readiness: a cluster must serve every slot and every master must answer), and
//! each master's slots.
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
    /// [`cluster_identity`]). A cluster connection whose masters changed is
    /// replaced (the next caller connects anew, reading the new masters and slots).
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
