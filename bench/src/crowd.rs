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

use crate::redis_stats::{command_stats, master_script_calls, print_master_shares, print_redis_cost};

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
    let keys = JwtKeys::new(settings.auth.jwt_secret.expose());
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
