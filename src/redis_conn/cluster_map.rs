//! A Redis Cluster's masters as its slot map names them, each read through the
//! cluster client's own routing for one of its slots: what the reading of the
//! masters' identity ([`cluster_identity`](super::cluster_identity)) and the
//! placing of a change by a repair (`Redis::masters_by_slot`) both need.
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, ResponsePolicy, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

/// A master's identity (`run_id/master_replid`) and its slot ranges (inclusive).
pub type MasterSlots = (String, Vec<(u16, u16)>);

/// A master of the cluster's slot map: its node id, address and slot ranges.
pub(super) struct Master {
    pub(super) id: String,
    pub(super) addr: String,
    pub(super) ranges: Vec<(u16, u16)>,
}

/// Every master's identity with its slot ranges, each read from the master itself:
/// what a repair needs to place a change. Fails if a
/// master does not answer for its own slots: the change cannot be placed yet.
pub(super) async fn by_master(c: &mut ClusterConnection) -> Result<Vec<MasterSlots>, RedisError> {
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
pub(super) async fn probe(mut c: ClusterConnection, slot: u16) -> Result<(String, String), RedisError> {
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
pub(super) async fn any_master(c: &mut ClusterConnection, cmd: redis::Cmd) -> Result<Value, RedisError> {
    let any = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, Some(ResponsePolicy::OneSucceeded)));
    c.route_command(cmd, any).await?.extract_error()
}

/// The masters of a `CLUSTER SLOTS` reply (the first node of each range).
pub(super) fn masters_of(slots: Value) -> Result<Vec<Master>, RedisError> {
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
pub(super) fn identity_of(info: &str) -> Result<String, RedisError> {
    let field = |name: &str| info.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    if field("role:") != Some("master") {
        return Err(RedisError::from((
            ErrorKind::Server(ServerErrorKind::ReadOnly),
            "a node the cluster client takes for a master is not one",
        )));
    }
    Ok(format!(
        "{}/{}",
        super::run_id::run_id_of(info)?,
        field("master_replid:").unwrap_or("")
    ))
}

pub(super) fn cluster_down(why: &str) -> RedisError {
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
}
