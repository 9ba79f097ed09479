//! `seckill-bench crowd`: a flash crowd against a running server.
//!
//! Creates a flash-sale voucher through the admin API, fires one request per
//! distinct shopper at a fixed concurrency, prints requests/s and latency
//! percentiles per outcome, waits until every accepted order is persisted, checks
//! the invariants (accepted = min(stock, shoppers), persisted = accepted, Redis
//! stock = stock - accepted) and counts the Redis commands the run cost. On a Redis
//! Cluster (`SECKILL_REDIS_CLUSTER=true`) it also prints each master's share of the
//! script calls (`INFO commandstats` of every master, before and after): with
//! `--stock-shards` above 1 one sale's orders spread over the masters.
use anyhow::{bail, Context, Result};
use chrono::Utc;
use hdrhistogram::Histogram;
use seckill::config::Settings;
use seckill::http::auth::{JwtKeys, Role};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Base URL of the running server.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Stock of the voucher the run creates.
    #[arg(long, default_value_t = 10_000)]
    pub stock: u32,
    /// Distinct shoppers; each sends one order request.
    #[arg(long, default_value_t = 50_000)]
    pub shoppers: u32,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// How long to wait for every accepted order to be persisted.
    #[arg(long, default_value_t = 120)]
    pub drain_timeout_secs: u64,
    /// `stock_shards` of the voucher the run creates (1-64).
    #[arg(long, default_value_t = 1)]
    pub stock_shards: u32,
}

type Hist = Histogram<u64>;

pub async fn run(args: Args, settings: &Settings) -> Result<()> {
    let keys = JwtKeys::new(settings.jwt_secret.expose());
    let admin = keys.mint(1, Role::Admin, 3600);
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .timeout(Duration::from_secs(30))
        .build()?;
    let base = args.url.trim_end_matches('/').to_owned();
    let now = Utc::now();
    let created: Value = client
        .post(format!("{base}/api/v1/admin/vouchers"))
        .bearer_auth(&admin)
        .json(&json!({
            "shop_id": "1", "title": "bench", "pay_value": 100, "actual_value": 1000, "stock": args.stock,
            "stock_shards": args.stock_shards,
            "begin_at": (now - chrono::Duration::seconds(1)).to_rfc3339(),
            "end_at": (now + chrono::Duration::hours(1)).to_rfc3339(),
        }))
        .send()
        .await
        .context("creating the bench voucher")?
        .error_for_status()?
        .json()
        .await?;
    let voucher = created["id"].as_str().context("voucher id")?.to_owned();
    // Let every instance's cache learn the voucher.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let base_user = (now.timestamp_millis() % 1_000_000_000) * 1000 + 1;
    let tokens: Arc<Vec<String>> = Arc::new(
        (0..args.shoppers as i64)
            .map(|i| keys.mint(base_user + i, Role::Shopper, 3600))
            .collect(),
    );
    let redis_before = command_stats(settings).await.ok();
    let masters_before = master_script_calls(settings).await.ok();

    let next = Arc::new(AtomicUsize::new(0));
    let url = Arc::new(format!("{base}/api/v1/vouchers/{voucher}/orders"));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency {
        let (client, tokens, next, url) = (client.clone(), tokens.clone(), next.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let mut hists: BTreeMap<String, Hist> = BTreeMap::new();
            let mut last_accept = None;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(token) = tokens.get(i) else { break };
                let t = Instant::now();
                let outcome = match client.post(url.as_str()).bearer_auth(token).send().await {
                    Ok(resp) if resp.status().as_u16() == 202 => {
                        last_accept = Some(Instant::now());
                        "accepted".to_owned()
                    }
                    Ok(resp) => {
                        let status = resp.status().as_u16();
                        let body: Value = resp.json().await.unwrap_or_default();
                        format!("{status} {}", body["error"]["code"].as_str().unwrap_or("?"))
                    }
                    Err(e) => format!(
                        "transport error ({})",
                        if e.is_timeout() { "timeout" } else { "connect" }
                    ),
                };
                let us = t.elapsed().as_micros() as u64;
                hists
                    .entry(outcome)
                    .or_insert_with(|| Hist::new(3).expect("histogram"))
                    .record(us.max(1))
                    .ok();
            }
            (hists, last_accept)
        }));
    }
    let mut hists: BTreeMap<String, Hist> = BTreeMap::new();
    let mut last_accept: Option<Instant> = None;
    for t in tasks {
        let (h, last) = t.await?;
        for (k, v) in h {
            hists
                .entry(k)
                .or_insert_with(|| Hist::new(3).expect("histogram"))
                .add(v)
                .ok();
        }
        last_accept = last_accept.max(last);
    }
    let elapsed = started.elapsed();
    let total: u64 = hists.values().map(|h| h.len()).sum();
    println!(
        "voucher {voucher}: stock {}, stock_shards {}, {} shoppers, concurrency {}",
        args.stock, args.stock_shards, args.shoppers, args.concurrency
    );
    println!(
        "{total} requests in {:.3}s = {:.0} requests/s",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64()
    );
    println!(
        "{:<28} {:>8} {:>9} {:>9} {:>9} {:>9}",
        "outcome", "count", "p50 ms", "p90 ms", "p99 ms", "max ms"
    );
    for (k, h) in &hists {
        let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        println!(
            "{k:<28} {:>8} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
            h.len(),
            ms(0.5),
            ms(0.9),
            ms(0.99),
            h.max() as f64 / 1000.0
        );
    }
    let accepted = hists.get("accepted").map(|h| h.len()).unwrap_or(0);

    // Drain: every accepted order must reach Postgres.
    let deadline = Instant::now() + Duration::from_secs(args.drain_timeout_secs);
    let stats = loop {
        let v: Value = client
            .get(format!("{base}/api/v1/admin/vouchers/{voucher}"))
            .bearer_auth(&admin)
            .send()
            .await?
            .json()
            .await?;
        let persisted = v["stats"]["orders_persisted"].as_u64().unwrap_or(0);
        if persisted >= accepted || Instant::now() > deadline {
            break v["stats"].clone();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    if let Some(last) = last_accept {
        println!(
            "all accepted orders persisted {:.3}s after the last accept",
            last.elapsed().as_secs_f64()
        );
    }
    if let (Some(before), Ok(after)) = (redis_before, command_stats(settings).await) {
        print_redis_cost(&before, &after, accepted);
    }
    if let (Some(before), Ok(after)) = (masters_before, master_script_calls(settings).await) {
        print_master_shares(&before, &after);
    }

    let expected = args.stock.min(args.shoppers) as u64;
    let persisted = stats["orders_persisted"].as_u64().unwrap_or(0);
    let remaining = stats["stock_remaining"].as_i64().unwrap_or(-1);
    let checks = [
        ("accepted == min(stock, shoppers)", accepted == expected),
        ("persisted == accepted", persisted == accepted),
        (
            "redis stock == stock - accepted",
            remaining == args.stock as i64 - accepted as i64,
        ),
    ];
    let mut ok = true;
    for (name, pass) in checks {
        println!("invariant {name}: {}", if pass { "ok" } else { "VIOLATED" });
        ok &= pass;
    }
    println!("stats: {stats}");
    if !ok {
        bail!("invariants violated");
    }
    Ok(())
}

/// `INFO commandstats` as command -> calls.
async fn command_stats(settings: &Settings) -> Result<BTreeMap<String, u64>> {
    let client = redis::Client::open(settings.redis_url.expose())?;
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
async fn master_script_calls(settings: &Settings) -> Result<BTreeMap<String, u64>> {
    if !settings.redis_cluster {
        bail!("not a cluster");
    }
    let mut out = BTreeMap::new();
    for url in settings.redis_url.expose().split(',') {
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
fn print_master_shares(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) {
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
fn print_redis_cost(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>, accepted: u64) {
    let mut delta: BTreeMap<&str, u64> = BTreeMap::new();
    for (k, v) in after {
        let d = v - before.get(k).copied().unwrap_or(0);
        if d > 0 {
            delta.insert(k, d);
        }
    }
    // Redis counts the commands a script runs as well as the EVALSHA itself; these
    // are the ones only reserve.lua runs on this path.
    let inside: u64 = ["get", "hexists", "decr", "hset", "xadd"]
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

/// `seckill bench-lock`: the distributed lock's costs against the configured Redis.
#[derive(clap::Args, Debug, Clone)]
pub struct LockArgs {
    /// Acquire+release rounds per measurement.
    #[arg(long, default_value_t = 5000)]
    pub iterations: u32,
    /// Tasks for the parallel uncontended measurement (each on its own lock).
    #[arg(long, default_value_t = 16)]
    pub tasks: u32,
    /// Hand-overs to time between two waiters.
    #[arg(long, default_value_t = 500)]
    pub handovers: u32,
}

pub async fn run_lock(args: LockArgs, settings: &Settings) -> Result<()> {
    use seckill::lock::LockService;
    let redis = seckill::redis_conn::Redis::new(
        settings.redis_url.expose(),
        settings.redis_cluster,
        settings.dependency_timeout,
    )?;
    let ns = format!("{}-lockbench-{}", settings.namespace, std::process::id());
    let stop = tokio_util::sync::CancellationToken::new();
    let locks = LockService::start(
        redis.clone(),
        seckill::keys::Keys::new(&ns),
        "bench",
        settings.lock_lease,
        stop.clone(),
    );
    let lease = Some(Duration::from_secs(10));

    // One task, one lock: the latency-bound rate (two script calls per round).
    let owner = locks.owner();
    let t = Instant::now();
    for _ in 0..args.iterations {
        let g = owner
            .try_lock("solo", Duration::ZERO, lease)
            .await?
            .context("uncontended lock was busy")?;
        g.release().await?.map_err(|e| anyhow::anyhow!(e))?;
    }
    let solo = args.iterations as f64 / t.elapsed().as_secs_f64();
    println!("uncontended acquire+release, 1 task: {solo:.0} per second");

    // Many tasks, each its own lock: the throughput over one multiplexed connection.
    let t = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..args.tasks {
        let owner = locks.owner();
        let n = args.iterations;
        tasks.push(tokio::spawn(async move {
            let name = format!("par-{i}");
            for _ in 0..n {
                let g = owner
                    .try_lock(&name, Duration::ZERO, lease)
                    .await?
                    .context("uncontended lock was busy")?;
                g.release().await?.map_err(|e| anyhow::anyhow!(e))?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let par = (args.iterations * args.tasks) as f64 / t.elapsed().as_secs_f64();
    println!(
        "uncontended acquire+release, {} tasks on distinct locks: {par:.0} per second",
        args.tasks
    );

    // Hand-over: the holder releases, the waiter (already waiting) acquires.
    let mut hist = Hist::new(3)?;
    let (a, b) = (locks.owner(), locks.owner());
    for _ in 0..args.handovers {
        let held = a
            .try_lock("handover", Duration::ZERO, lease)
            .await?
            .context("hand-over lock busy")?;
        let waiter = {
            let b = b.clone();
            tokio::spawn(async move {
                let g = b
                    .try_lock("handover", Duration::from_secs(5), lease)
                    .await?
                    .context("waiter timed out")?;
                let at = Instant::now();
                g.release().await?.map_err(|e| anyhow::anyhow!(e))?;
                anyhow::Ok(at)
            })
        };
        // Let the waiter find the lock busy and start waiting.
        tokio::time::sleep(Duration::from_millis(2)).await;
        let released = Instant::now();
        held.release().await?.map_err(|e| anyhow::anyhow!(e))?;
        let acquired = waiter.await??;
        hist.record((acquired - released).as_micros().max(1) as u64).ok();
    }
    println!(
        "hand-over latency between two waiters ({} hand-overs): p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        args.handovers,
        hist.value_at_quantile(0.5) as f64 / 1000.0,
        hist.value_at_quantile(0.99) as f64 / 1000.0,
        hist.max() as f64 / 1000.0
    );
    stop.cancel();
    let mut conn = redis.conn().await?;
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{ns}:*")).query_async(&mut conn).await?;
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL").arg(keys).query_async(&mut conn).await?;
    }
    Ok(())
}
