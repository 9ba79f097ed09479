//! The identity of a Redis Cluster's masters, read so that one master that does
//! not answer is its own trouble and not every sale's.
//!
//! The identity is the sorted `run_id/master_replid` of every master (see the
//! module above). It is read from every master at once (`INFO`, all masters).
//! When that fails or misses a master (one does not answer), it is read master by
//! master: the masters and their slots from `CLUSTER SLOTS`, then each master
//! through the cluster client's own routing for one of its slots, `CLUSTER MYID`
//! saying which node answered. A master that answers is read as it is now: a
//! restart, a failover, a fail-back changes the identity exactly as before. A
//! master that does not answer (or that the client routes its slots away from)
//! keeps the identity last read from it, and its slots are named in the reading:
//! the connection it was read for refuses every command on them (503) instead of
//! sending it, so nothing reaches that master through that connection, whatever it
//! has become meanwhile, and the handle replaces the connection once a reading
//! finds the masters that answer have changed. A master that does not answer and
//! was never read makes the reading fail: there is nothing to vouch for.
use super::cluster_map::{any_master, cluster_down, identity_of, masters_of, probe};
use super::verdict;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{RedisError, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// What the handles that share an identity have read of the masters.
#[derive(Default)]
pub(super) struct Masters {
    /// Each master's identity as last read from it, by address (`host:port`).
    known: Mutex<HashMap<String, String>>,
    /// The addresses the last reading could not reach, sorted.
    unreachable: Mutex<Vec<String>>,
    /// Bumped whenever that set changes.
    generation: AtomicU64,
}

/// One reading of the masters.
pub(super) struct Reading {
    pub identity: String,
    /// The slot ranges (inclusive) of the masters that did not answer.
    pub unreachable: Vec<(u16, u16)>,
    /// [`Masters::generation`] when read.
    pub generation: u64,
}

impl Masters {
    /// Changes whenever the set of masters that do not answer changes: a connection
    /// made while one did not is replaced once that changes (`Redis::current`).
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn note(&self, mut gone: Vec<String>) -> u64 {
        gone.sort();
        let mut last = self.unreachable.lock().expect("masters poisoned");
        if *last != gone {
            if gone.is_empty() {
                tracing::info!("every master of the Redis Cluster answers again");
            } else {
                tracing::warn!(masters = ?gone, "masters of the Redis Cluster do not answer: their slots are refused, the others' served");
            }
            *last = gone;
            return self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        }
        self.generation()
    }
}

/// Reads the masters' identity (see the module's doc). Refuses a cluster that does
/// not serve every slot and a node taken for a master that is not one.
pub(super) async fn read(c: &mut ClusterConnection, masters: &Masters) -> Result<Reading, RedisError> {
    let state: String = redis::from_redis_value(any_master(c, redis::cmd("CLUSTER").arg("INFO").to_owned()).await?)?;
    if !state.lines().any(|l| l.trim() == "cluster_state:ok") {
        return Err(cluster_down("the Redis Cluster does not serve every slot"));
    }
    let size = state
        .lines()
        .find_map(|l| l.trim().strip_prefix("cluster_size:"))
        .and_then(|n| n.trim().parse::<usize>().ok());
    // At once, unless a master did not answer last time (it would hold up every
    // reading until its deadline).
    if masters.unreachable.lock().expect("masters poisoned").is_empty() {
        let all = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
        let info = redis::cmd("INFO").arg("server").arg("replication").to_owned();
        match c.route_command(info, all).await {
            Ok(Value::Map(pairs)) if Some(pairs.len()) == size => {
                let mut ids = Vec::with_capacity(pairs.len());
                for (addr, info) in pairs {
                    let addr: String = redis::from_redis_value(addr)?;
                    let info: String = redis::from_redis_value(info.extract_error()?)?;
                    let id = identity_of(&info)?;
                    masters.known.lock().expect("masters poisoned").insert(addr, id.clone());
                    ids.push(id);
                }
                ids.sort();
                return Ok(Reading {
                    identity: ids.join(","),
                    unreachable: Vec::new(),
                    generation: masters.note(Vec::new()),
                });
            }
            // The client has no connection to a master (it skips it), or one did
            // not answer: master by master.
            Ok(_) => {}
            Err(e) if verdict::unreachable(&e) => {}
            Err(e) => return Err(e),
        }
    }
    one_by_one(c, masters).await
}

async fn one_by_one(c: &mut ClusterConnection, masters: &Masters) -> Result<Reading, RedisError> {
    let slots = any_master(c, redis::cmd("CLUSTER").arg("SLOTS").to_owned()).await?;
    let map = masters_of(slots)?;
    let answers = futures::future::join_all(map.iter().map(|m| probe(c.clone(), m.ranges[0].0))).await;
    let mut ids = Vec::with_capacity(map.len());
    let (mut refused, mut gone) = (Vec::new(), Vec::new());
    for (m, answer) in map.iter().zip(answers) {
        let silent = match answer {
            Ok((node, info)) if node == m.id => {
                let id = identity_of(&info)?;
                let mut known = masters.known.lock().expect("masters poisoned");
                known.insert(m.addr.clone(), id.clone());
                ids.push(id);
                continue;
            }
            // Another node answered for its slots: the client has no connection
            // to it and would send them elsewhere.
            Ok((node, _)) => format!("node {node} answered for it"),
            Err(e) if verdict::unreachable(&e) => e.to_string(),
            Err(e) => return Err(e),
        };
        let Some(id) = masters.known.lock().expect("masters poisoned").get(&m.addr).cloned() else {
            return Err(cluster_down(&format!(
                "the master {} at {} does not answer ({silent}) and was never read",
                m.id, m.addr
            )));
        };
        ids.push(id);
        refused.extend(m.ranges.iter().copied());
        gone.push(m.addr.clone());
    }
    ids.sort();
    Ok(Reading {
        identity: ids.join(","),
        unreachable: refused,
        generation: masters.note(gone),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_set_of_silent_masters_is_a_new_generation() {
        let m = Masters::default();
        let g = m.generation();
        assert_eq!(m.note(vec![]), g);
        let one = m.note(vec!["b:2".into(), "a:1".into()]);
        assert!(one > g);
        assert_eq!(m.note(vec!["a:1".into(), "b:2".into()]), one);
        assert!(m.note(vec![]) > one);
    }
}
