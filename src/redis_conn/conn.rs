//! One connection to one server process ([`Conn`]): the `run_id` it was verified
//! with, the slots it refuses, and the mark that it broke (see the module above).
use super::routing::{first_key, split_by_slot};
use super::verdict;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// One connection to one server process. Commands that fail because the
/// connection is gone (or the server stopped being a writable master) mark it
/// broken, so that the next caller opens a new one and checks who answers.
#[derive(Clone)]
pub struct Conn {
    pub(super) inner: Link,
    pub(super) broken: Arc<AtomicBool>,
    pub(super) run_id: Arc<str>,
    /// On a cluster, the slot ranges of the masters that did not answer when the
    /// identity was read (see [`cluster_identity`](super::cluster_identity)):
    /// commands on them are refused here, never sent. Empty otherwise.
    pub(super) refused: Arc<[(u16, u16)]>,
    /// The masters' generation when read: a connection that refuses slots is
    /// replaced once the masters that answer change.
    pub(super) generation: u64,
}

#[derive(Clone)]
pub(super) enum Link {
    Node(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Conn {
    /// The `run_id` of the server process behind this connection.
    pub fn run_id(&self) -> &Arc<str> {
        &self.run_id
    }

    /// The slot of a command on a master that did not answer when this
    /// connection's identity was read, if it is one.
    fn refuses(&self, cmd: &Cmd) -> Option<u16> {
        if self.refused.is_empty() {
            return None;
        }
        let slot = crate::keys::slot(first_key(cmd)?);
        self.refused
            .iter()
            .any(|(a, b)| (*a..=*b).contains(&slot))
            .then_some(slot)
    }

    /// Marks the connection broken after an error, or a reply (`refused`), that
    /// says the server may not be the writable master we know (see [`verdict`]).
    pub(super) fn watch<T>(&self, r: RedisResult<T>, refused: impl Fn(&T) -> bool) -> RedisResult<T> {
        let broken = match &r {
            // A timeout too: on a cluster (no retries, see `cluster_client`) it
            // may be a node gone; connect anew and check who answers. Not a server
            // that is out of memory or busy: it is still the one we know.
            Err(e) => verdict::breaks_connection(e),
            Ok(v) => refused(v),
        };
        if broken {
            self.broken.store(true, Ordering::Release);
        }
        r
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            if let Some(slot) = self.refuses(cmd) {
                return Err(unverified_slot(slot));
            }
            let r = match &mut self.inner {
                Link::Node(c) => c.req_packed_command(cmd).await,
                Link::Cluster(c) => c.req_packed_command(cmd).await,
            };
            self.watch(r, verdict::reply_refuses)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            if let Some(slot) = cmd.cmd_iter().find_map(|c| self.refuses(c)) {
                return Err(unverified_slot(slot));
            }
            let r = match &mut self.inner {
                Link::Node(c) => c.req_packed_commands(cmd, offset, count).await,
                Link::Cluster(c) if cmd.is_transaction() => c.req_packed_commands(cmd, offset, count).await,
                Link::Cluster(c) => split_by_slot(c, cmd).await,
            };
            self.watch(r, |replies| replies.iter().any(verdict::reply_refuses))
        })
    }

    fn get_db(&self) -> i64 {
        match &self.inner {
            Link::Node(c) => c.get_db(),
            Link::Cluster(c) => c.get_db(),
        }
    }
}

/// A command refused by [`Conn::refuses`]: transient (503), and it does not break
/// the connection (it was never sent; the connection serves the other slots).
fn unverified_slot(slot: u16) -> RedisError {
    RedisError::from((
        ErrorKind::ClusterConnectionNotFound,
        "the master of this slot did not answer when the connection was verified",
        format!("slot {slot}"),
    ))
}
