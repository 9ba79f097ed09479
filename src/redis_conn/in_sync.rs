//! How many replicas of each master are in sync, as Redis reports them in `INFO
//! replication` (`slaveN:…,state=online,…,lag=S`): a replica counts when it is
//! `online` (past its first sync) and acknowledged the replication stream at most
//! [`MAX_LAG_S`] seconds ago, as Redis's own `min-replicas-max-lag` counts them.
//! Orders that wait for replicas are refused before they reserve on a master with
//! fewer (`crate::ordering::replication`).
use super::cluster_map::{any_master, masters_of, probe};
use super::conn::Link;
use super::handle::Redis;
use redis::RedisResult;

/// The most seconds since a replica's last acknowledgement for it to count.
pub const MAX_LAG_S: i64 = 2;

/// Each master's in-sync replicas with its slot ranges (inclusive); one node holds
/// every slot.
pub type InSync = Vec<(i64, Vec<(u16, u16)>)>;

/// The replicas `info` (a master's `INFO replication`) lists as in sync.
pub fn in_sync_of(info: &str) -> i64 {
    info.lines()
        .filter(|l| l.starts_with("slave") && l.contains(':'))
        .filter(|l| {
            let fields = l.split_once(':').map(|(_, f)| f).unwrap_or("");
            let field = |name: &str| {
                fields
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            };
            field("state") == Some("online")
                && field("lag")
                    .and_then(|s| s.parse::<i64>().ok())
                    .is_some_and(|s| s <= MAX_LAG_S)
        })
        .count() as i64
}

impl Redis {
    /// Every master's in-sync replicas, each read from the master itself. A master
    /// that does not answer counts none (its orders could not be acknowledged).
    pub async fn in_sync_replicas(&self) -> RedisResult<InSync> {
        let c = self.conn().await?;
        let info = || redis::cmd("INFO").arg("replication").to_owned();
        match c.inner.clone() {
            Link::Node(mut n) => {
                let one: String = c.watch(info().query_async(&mut n).await, |_| false)?;
                Ok(vec![(in_sync_of(&one), vec![(0, 16383)])])
            }
            Link::Cluster(mut cluster) => {
                let slots = c.watch(
                    any_master(&mut cluster, redis::cmd("CLUSTER").arg("SLOTS").to_owned()).await,
                    |_| false,
                )?;
                let map = masters_of(slots)?;
                let answers =
                    futures::future::join_all(map.iter().map(|m| probe(cluster.clone(), m.ranges[0].0))).await;
                Ok(map
                    .into_iter()
                    .zip(answers)
                    .map(|(m, answer)| match answer {
                        Ok((node, info)) if node == m.id => (in_sync_of(&info), m.ranges),
                        _ => (0, m.ranges),
                    })
                    .collect())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_online_replicas_within_the_lag_count() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:4\r\n\
            slave0:ip=127.0.0.1,port=7004,state=online,offset=100,lag=0\r\n\
            slave1:ip=127.0.0.1,port=7005,state=wait_bgsave,offset=0,lag=0\r\n\
            slave2:ip=127.0.0.1,port=7006,state=online,offset=90,lag=7\r\n\
            slave3:ip=127.0.0.1,port=7007,state=online,offset=100,lag=2\r\n\
            master_failover_state:no-failover\r\nslave_expires_tracked_keys:0\r\n";
        assert_eq!(in_sync_of(info), 2);
        assert_eq!(in_sync_of("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"), 0);
    }
}
