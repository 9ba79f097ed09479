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
use super::verdict;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, ResponsePolicy, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};
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

/// A master of the cluster's slot map: its node id, address and slot ranges.
struct Master {
    id: String,
    addr: String,
    ranges: Vec<(u16, u16)>,
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

/// Every master's identity with its slot ranges, each read from the master itself:
/// what a repair needs to place a change (see `crate::epoch::scope`). Fails if a
/// master does not answer for its own slots: the change cannot be placed yet.
pub(super) async fn by_master(c: &mut ClusterConnection) -> Result<Vec<super::MasterSlots>, RedisError> {
    let slots = any_master(c, redis::cmd("CLUSTER").arg("SLOTS").to_owned()).await?;
    let map = masters_of(slots)?;
    let answers = futures::future::join_all(map.iter().map(|m| probe(c.clone(), m.ranges[0].0))).await;
    let mut out = Vec::with_capacity(map.len());
    for (m, answer) in map.into_iter().zip(answers) {
        match answer? {
            (node, info) if node == m.id => out.push((identity_of(&info)?, m.ranges)),
            (node, _) => {
                return Err(cluster_down(&format!(
                    "node {node} answered for the slots of master {} at {}",
                    m.id, m.addr
                )))
            }
        }
    }
    Ok(out)
}

/// `CLUSTER MYID` and `INFO` of the node the client sends `slot`'s commands to.
async fn probe(mut c: ClusterConnection, slot: u16) -> Result<(String, String), RedisError> {
    let mut p = redis::pipe();
    p.cmd("CLUSTER")
        .arg("MYID")
        .cmd("INFO")
        .arg("server")
        .arg("replication");
    let route = SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
    let mut values = c.route_pipeline(p, 0, 2, route).await?.into_iter();
    let (Some(id), Some(info)) = (values.next(), values.next()) else {
        return Err(RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "CLUSTER MYID + INFO",
        )));
    };
    Ok((
        redis::from_redis_value(id.extract_error()?)?,
        redis::from_redis_value(info.extract_error()?)?,
    ))
}

/// The first answer of any master the client is connected to.
async fn any_master(c: &mut ClusterConnection, cmd: redis::Cmd) -> Result<Value, RedisError> {
    let any = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, Some(ResponsePolicy::OneSucceeded)));
    c.route_command(cmd, any).await?.extract_error()
}

/// The masters of a `CLUSTER SLOTS` reply (the first node of each range).
fn masters_of(slots: Value) -> Result<Vec<Master>, RedisError> {
    let bad = || RedisError::from((ErrorKind::UnexpectedReturnType, "CLUSTER SLOTS"));
    let Value::Array(ranges) = slots else { return Err(bad()) };
    let mut map: Vec<Master> = Vec::new();
    for range in ranges {
        let Value::Array(range) = range else { return Err(bad()) };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(node))) =
            (range.first(), range.get(1), range.get(2))
        else {
            return Err(bad());
        };
        let text = |v: Option<&Value>| v.and_then(|v| redis::from_redis_value_ref::<String>(v).ok());
        let (Some(host), Some(Value::Int(port)), Some(id)) = (text(node.first()), node.get(1), text(node.get(2)))
        else {
            return Err(bad());
        };
        let range = (*start as u16, *end as u16);
        match map.iter_mut().find(|m| m.id == id) {
            Some(m) => m.ranges.push(range),
            None => map.push(Master {
                id,
                addr: format!("{host}:{port}"),
                ranges: vec![range],
            }),
        }
    }
    if map.is_empty() {
        return Err(cluster_down("the Redis Cluster serves no slot"));
    }
    Ok(map)
}

/// A master's `run_id/master_replid`: a promotion gives the promoted node a new
/// replication id, also when the same processes fail back later.
fn identity_of(info: &str) -> Result<String, RedisError> {
    let field = |name: &str| info.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    if field("role:") != Some("master") {
        return Err(RedisError::from((
            ErrorKind::Server(ServerErrorKind::ReadOnly),
            "a node the cluster client takes for a master is not one",
        )));
    }
    Ok(format!(
        "{}/{}",
        super::run_id_of(info)?,
        field("master_replid:").unwrap_or("")
    ))
}

fn cluster_down(why: &str) -> RedisError {
    RedisError::from((
        ErrorKind::Server(ServerErrorKind::ClusterDown),
        "the Redis Cluster's masters cannot be vouched for",
        why.to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64, id: &str) -> Value {
        Value::Array(vec![
            Value::BulkString(host.into()),
            Value::Int(port),
            Value::BulkString(id.into()),
        ])
    }

    #[test]
    fn the_masters_of_a_slot_map_with_their_ranges() {
        let range = |a: i64, b: i64, master: Value| Value::Array(vec![Value::Int(a), Value::Int(b), master]);
        let slots = Value::Array(vec![
            range(0, 5460, node("127.0.0.1", 7100, "a")),
            range(5461, 10922, node("127.0.0.1", 7101, "b")),
            range(10923, 16383, node("127.0.0.1", 7102, "c")),
            range(16000, 16001, node("127.0.0.1", 7100, "a")),
        ]);
        let map = masters_of(slots).unwrap();
        assert_eq!(map.len(), 3);
        assert_eq!(map[0].addr, "127.0.0.1:7100");
        assert_eq!(map[0].ranges, vec![(0, 5460), (16000, 16001)]);
        assert!(masters_of(Value::Array(vec![])).is_err());
    }

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
