//! What a run cost Redis: `INFO commandstats` before and after, of the one node or
//! of every master of a cluster, and how the script calls spread over the masters.
use anyhow::{bail, Result};
use seckill::config::Settings;
use std::collections::BTreeMap;

/// `INFO commandstats` as command -> calls.
pub(crate) async fn command_stats(settings: &Settings) -> Result<BTreeMap<String, u64>> {
    let client = redis::Client::open(settings.services.redis_url.expose())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut conn).await?;
    Ok(parse_command_stats(&info))
}

pub fn parse_command_stats(info: &str) -> BTreeMap<String, u64> {
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls="))?.parse().ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// Script calls (EVALSHA + EVAL) so far on each master of a Redis Cluster, by
/// address; fails on a single node (there the one server runs them all).
pub(crate) async fn master_script_calls(settings: &Settings) -> Result<BTreeMap<String, u64>> {
    if !settings.services.redis_cluster {
        bail!("not a cluster");
    }
    let mut out = BTreeMap::new();
    for url in settings.services.redis_url.expose().split(',') {
        let client = redis::Client::open(url.trim())?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        let role: String = redis::cmd("INFO").arg("replication").query_async(&mut conn).await?;
        if !role.lines().any(|l| l.trim() == "role:master") {
            continue;
        }
        let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut conn).await?;
        let stats = parse_command_stats(&info);
        let calls = ["evalsha", "eval"].iter().filter_map(|c| stats.get(*c)).sum();
        out.insert(url.trim().to_owned(), calls);
    }
    Ok(out)
}

/// Each master's share of the script calls made during the run.
pub(crate) fn print_master_shares(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) {
    let delta: BTreeMap<&str, u64> = after
        .iter()
        .map(|(m, n)| (m.as_str(), n - before.get(m).copied().unwrap_or(0)))
        .collect();
    let total: u64 = delta.values().sum();
    for (m, n) in &delta {
        println!(
            "master {m}: {n} script calls, {:.1}% of {total}",
            if total > 0 {
                *n as f64 * 100.0 / total as f64
            } else {
                0.0
            }
        );
    }
}

/// Commands issued by clients, and those run inside scripts, per accepted order.
pub(crate) fn print_redis_cost(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>, accepted: u64) {
    let mut delta: BTreeMap<&str, u64> = BTreeMap::new();
    for (k, v) in after {
        let d = v - before.get(k).copied().unwrap_or(0);
        if d > 0 {
            delta.insert(k, d);
        }
    }
    // Redis counts the commands a script runs as well as the EVALSHA itself; these
    // are the ones only reserve.lua runs on this path (HEXISTS and DECR: an
    // older script's).
    let inside: u64 = ["get", "hexists", "hmget", "decr", "decrby", "hset", "incrby", "xadd"]
        .iter()
        .filter_map(|c| delta.get(c))
        .sum();
    let total: u64 = delta.values().sum();
    let per = |n: u64| {
        if accepted > 0 {
            n as f64 / accepted as f64
        } else {
            0.0
        }
    };
    println!("redis commands during the run: {delta:?}");
    println!(
        "redis commands per accepted order: {:.3} issued by clients (all but the script-internal ones), {:.3} counting script-internal calls",
        per(total - inside),
        per(total)
    );
}
