//! What readiness needs to know of every master, asked of every master: on a
//! cluster a keyless command goes to one node of the client's choosing (perhaps
//! a replica, which has no replicas of its own), so these facts are read from
//! each master (`AllMasters`) and the weakest one is reported.
use super::conn::Link;
use super::handle::Redis;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{RedisResult, Value};

/// The masters' replication and eviction, as readiness reports them.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MasterFacts {
    /// The fewest replicas connected to any master (an order acknowledged after
    /// `WAIT n` needs `n` on the master of its slot).
    pub replicas: i64,
    /// Each master's `maxmemory-policy` that evicts keys (anything but
    /// `noeviction`), e.g. `allkeys-lru`: an evicting Redis drops shoppers' marks,
    /// stock or outbox entries silently under memory pressure. Empty when none does.
    pub evicting: Vec<String>,
    /// The fullest master's `used_memory` over its `maxmemory`, in thousandths;
    /// None when no master has a `maxmemory` (no limit: nothing to be near).
    /// Redis refuses writes past its limit (`noeviction`): orders would answer 503.
    pub memory_used_permille: Option<i64>,
}

impl MasterFacts {
    /// Whether no master may evict keys.
    pub fn eviction_policy_ok(&self) -> bool {
        self.evicting.is_empty()
    }
}

/// The facts from every master's `INFO` (replication and memory sections).
pub(super) fn of(infos: &[String]) -> MasterFacts {
    let field = |info: &str, name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_owned())
    };
    let replicas = infos
        .iter()
        .map(|i| field(i, "connected_slaves:").and_then(|n| n.parse().ok()).unwrap_or(0))
        .min()
        .unwrap_or(0);
    let mut evicting: Vec<String> = infos
        .iter()
        .map(|i| field(i, "maxmemory_policy:").unwrap_or_else(|| "unknown".into()))
        .filter(|p| p != "noeviction")
        .collect();
    evicting.sort();
    evicting.dedup();
    let num = |i: &str, name: &str| field(i, name).and_then(|v| v.parse::<i64>().ok());
    let memory_used_permille = infos
        .iter()
        .filter_map(|i| match (num(i, "used_memory:"), num(i, "maxmemory:")) {
            (Some(used), Some(max)) if max > 0 => Some(used.saturating_mul(1000) / max),
            _ => None,
        })
        .max();
    MasterFacts {
        replicas,
        evicting,
        memory_used_permille,
    }
}

impl Redis {
    /// Replicas and eviction policy of the node, or of every master of a cluster.
    pub async fn master_facts(&self) -> RedisResult<MasterFacts> {
        let c = self.conn().await?;
        // The default sections include replication and memory (and, unlike INFO
        // with several sections, on any Redis version).
        let info = || redis::cmd("INFO").to_owned();
        let infos: Vec<String> = match c.inner.clone() {
            Link::Node(mut n) => {
                let one: String = c.watch(info().query_async(&mut n).await, |_| false)?;
                vec![one]
            }
            Link::Cluster(mut cluster) => {
                let all = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                let reply = c.watch(cluster.route_command(info(), all).await, |_| false)?;
                match reply {
                    Value::Map(pairs) => pairs
                        .into_iter()
                        .map(|(_, v)| redis::from_redis_value(v))
                        .collect::<Result<_, _>>()?,
                    other => redis::from_redis_value(other)?,
                }
            }
        };
        Ok(of(&infos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_weakest_master_and_every_evicting_policy_are_reported() {
        let m = |slaves: i64, policy: &str| {
            format!("# Replication\r\nrole:master\r\nconnected_slaves:{slaves}\r\n# Memory\r\nmaxmemory_policy:{policy}\r\n")
        };
        let all_fine = of(&[m(2, "noeviction"), m(1, "noeviction"), m(2, "noeviction")]);
        assert_eq!(all_fine.replicas, 1);
        assert!(all_fine.eviction_policy_ok());
        let one_evicts = of(&[m(1, "noeviction"), m(1, "allkeys-lru"), m(1, "allkeys-lru")]);
        assert_eq!(one_evicts.evicting, vec!["allkeys-lru".to_owned()]);
        assert!(!one_evicts.eviction_policy_ok());
        // A policy Redis does not report is not taken for noeviction.
        assert!(!of(&["# Replication\r\nconnected_slaves:0\r\n".to_owned()]).eviction_policy_ok());
        // Memory: the fullest master with a limit; none without one.
        assert_eq!(all_fine.memory_used_permille, None);
        let mem = |used: i64, max: i64| format!("# Memory\r\nused_memory:{used}\r\nmaxmemory:{max}\r\n");
        assert_eq!(
            of(&[mem(500, 1000), mem(900, 1000), mem(10, 0)]).memory_used_permille,
            Some(900)
        );
    }
}
