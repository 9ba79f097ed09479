//! What a sharded sale costs Redis, from `INFO commandstats`: an idle
//! sale of 64 shards with two API instances, and its sell-out. A measurement, not
//! a check: it is ignored by default and must run alone on a quiet Redis
//! (`INFO commandstats` counts every client of the server):
//! `cargo test --test api cost:: -- --ignored --nocapture`.
use crate::helpers::*;
use reqwest::StatusCode;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Calls per command since the server started.
async fn commandstats() -> HashMap<String, u64> {
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.split(',').find_map(|f| f.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

/// The calls per command between two readings, largest first, and their total.
fn delta(before: &HashMap<String, u64>, after: &HashMap<String, u64>) -> (u64, Vec<(String, u64)>) {
    let mut d: Vec<(String, u64)> = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    d.sort_by_key(|e| std::cmp::Reverse(e.1));
    (d.iter().map(|(_, n)| n).sum(), d)
}

async fn per_second(label: &str, window: Duration) {
    let before = commandstats().await;
    tokio::time::sleep(window).await;
    let after = commandstats().await;
    let (total, top) = delta(&before, &after);
    let secs = window.as_secs_f64();
    let top: Vec<String> = top
        .iter()
        .take(8)
        .map(|(k, n)| format!("{k} {:.1}/s", *n as f64 / secs))
        .collect();
    println!("{label}: {:.1} commands/s ({top:?})", total as f64 / secs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a measurement: run alone on a quiet Redis, with --nocapture"]
async fn redis_commands_of_an_idle_64_shard_sale_and_of_its_sell_out() {
    let ns = Namespace::new().await;
    let spawn = || TestApp::builder(&ns).env("SECKILL_RATE_LIMIT_PER_USER", "1000").spawn();
    let (a, b) = (spawn().await, spawn().await);
    let window = Duration::from_secs(10);
    tokio::time::sleep(Duration::from_secs(2)).await;
    per_second("two instances, no sale", window).await;
    let stock = 640;
    let v = a.sharded_sale(stock, 64).await;
    // Past the creation, the first audits and the guard's first checks.
    tokio::time::sleep(Duration::from_secs(6)).await;
    per_second("two instances, one idle running sale of 64 shards", window).await;

    // The sell-out: 1,000 shoppers, half through each instance, those answered
    // 503 try again (up to 50 rounds).
    let before = commandstats().await;
    let started = Instant::now();
    let mut accepted = 0;
    let mut codes: HashMap<String, usize> = HashMap::new();
    let mut pending: Vec<i64> = (1..=1000).collect();
    for _ in 0..50 {
        if pending.is_empty() {
            break;
        }
        use futures::StreamExt;
        let answers: Vec<(i64, StatusCode, serde_json::Value)> = futures::stream::iter(pending.iter().map(|&u| {
            let app = if u % 2 == 0 { &a } else { &b };
            async move {
                let (s, body) = app.order(v, u).await;
                (u, s, body)
            }
        }))
        .buffer_unordered(64)
        .collect()
        .await;
        pending.clear();
        for (u, s, body) in answers {
            *codes.entry(code(&body).to_owned()).or_default() += 1;
            match s {
                StatusCode::ACCEPTED => accepted += 1,
                StatusCode::SERVICE_UNAVAILABLE => pending.push(u),
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = started.elapsed();
    let after = commandstats().await;
    let (total, top) = delta(&before, &after);
    println!(
        "sell-out of {stock} units on 64 shards, two instances, 1000 shoppers: {accepted} accepted in {took:?}, answers {codes:?}; {total} Redis commands: {top:?}"
    );
    assert_eq!(accepted, stock);
}
