//! `seckill-bench raffle`: what readers and entrants see while a large raffle is
//! closed and drawn. It makes a raffle of `--entries` entries (written straight
//! into the database: entering through the API would take the run's minutes) and
//! a second raffle still open; from `draw_at` until the draw is done, `--readers`
//! tasks send `GET .../raffle`, `GET .../raffle/me`, a page of the entries and
//! an entry into the open raffle, one after the other. Prints how long the close
//! and the draw took, and the latency of each kind of request during them.
#[path = "../../tests/api/helpers/beacon.rs"]
#[allow(dead_code)]
mod beacon;

use anyhow::{ensure, Context, Result};
use beacon::TestChain;
use hdrhistogram::Histogram;
use seckill::config::Settings;
use seckill::http::auth::{JwtKeys, Role};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct RaffleArgs {
    /// Base URL of the running server.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Entries of the raffle drawn.
    #[arg(long, default_value_t = 200_000)]
    pub entries: i64,
    /// Winners (the sale's stock).
    #[arg(long, default_value_t = 1_000)]
    pub stock: i64,
    /// Readers at once during the draw.
    #[arg(long, default_value_t = 8)]
    pub readers: usize,
}

const KINDS: [&str; 4] = [
    "GET raffle",
    "GET raffle/me",
    "GET raffle/entries",
    "POST raffle/entries (another sale)",
];

async fn sale(client: &reqwest::Client, base: &str, admin: &str, body: Value) -> Result<i64> {
    let resp = client
        .post(format!("{base}/api/v1/admin/vouchers"))
        .bearer_auth(admin)
        .json(&body)
        .send()
        .await?;
    let status = resp.status();
    let body: Value = resp.json().await?;
    ensure!(status.as_u16() == 201, "creating a raffle: {status} {body}");
    Ok(body["id"].as_str().context("an id")?.parse()?)
}

async fn summary(client: &reqwest::Client, base: &str, v: i64) -> Result<Value> {
    Ok(client
        .get(format!("{base}/api/v1/vouchers/{v}/raffle"))
        .send()
        .await?
        .json()
        .await?)
}

pub async fn run(args: RaffleArgs, settings: &Settings) -> Result<()> {
    let keys = JwtKeys::new(settings.auth.jwt_secret.expose());
    let admin = keys.mint(1, Role::Admin, 3600);
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
    let base = args.url.trim_end_matches('/').to_owned();
    let chain = TestChain::fast();
    let now = chrono::Utc::now();
    let draw_at = now + chrono::Duration::seconds(10);
    let hour = chrono::Duration::hours(1);
    let body = |begin: chrono::DateTime<chrono::Utc>, draw: chrono::DateTime<chrono::Utc>| {
        json!({"shop_id": "1", "title": "raffle bench", "pay_value": 100, "actual_value": 1000,
               "stock": args.stock, "begin_at": begin.to_rfc3339(), "end_at": (draw + hour).to_rfc3339(),
               "admission": "raffle", "draw_at": draw.to_rfc3339(), "beacon": chain.field(None)})
    };
    let v = sale(&client, &base, &admin, body(draw_at, draw_at)).await?;
    let open = sale(&client, &base, &admin, body(now + hour, now + hour)).await?;
    let pg = sqlx::PgPool::connect(settings.services.database_url.expose()).await?;
    let started = Instant::now();
    sqlx::query(
        "INSERT INTO raffle_entries (voucher_id, user_id, entry)
         SELECT $1, g, encode(sha256(convert_to($1::text || ':' || g::text, 'UTF8')), 'hex')
           FROM generate_series(1, $2) g",
    )
    .bind(v)
    .bind(args.entries)
    .execute(&pg)
    .await?;
    println!(
        "{} entries written in {:.1} s",
        args.entries,
        started.elapsed().as_secs_f64()
    );
    ensure!(
        chrono::Utc::now() < draw_at,
        "writing the entries took past draw_at: fewer --entries"
    );
    let shoppers: Vec<String> = (1..=args.readers as i64)
        .map(|u| keys.mint(u, Role::Shopper, 3600))
        .collect();
    let newcomers: Vec<String> = (0..2000)
        .map(|u| keys.mint(args.entries + 1 + u, Role::Shopper, 3600))
        .collect();
    tokio::time::sleep((draw_at - chrono::Utc::now()).to_std().unwrap_or_default()).await;

    // Readers, from draw_at until drawn.
    let done = Arc::new(AtomicBool::new(false));
    let hists: Arc<Mutex<Vec<Histogram<u64>>>> = Arc::new(Mutex::new(
        (0..KINDS.len()).map(|_| Histogram::new(3).unwrap()).collect(),
    ));
    let unavailable = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for (r, shopper) in shoppers.into_iter().enumerate() {
        let (client, base, done, hists, unavailable) = (
            client.clone(),
            base.clone(),
            done.clone(),
            hists.clone(),
            unavailable.clone(),
        );
        let newcomers = newcomers.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = r;
            while !done.load(Ordering::Relaxed) {
                for (k, _) in KINDS.iter().enumerate() {
                    let req = match k {
                        0 => client.get(format!("{base}/api/v1/vouchers/{v}/raffle")),
                        1 => client
                            .get(format!("{base}/api/v1/vouchers/{v}/raffle/me"))
                            .bearer_auth(&shopper),
                        2 => client.get(format!("{base}/api/v1/vouchers/{v}/raffle/entries?limit=100")),
                        _ => {
                            i = (i + KINDS.len()) % newcomers.len();
                            client
                                .post(format!("{base}/api/v1/vouchers/{open}/raffle/entries"))
                                .bearer_auth(&newcomers[i])
                        }
                    };
                    let t = Instant::now();
                    let status = req.send().await.map(|r| r.status().as_u16()).unwrap_or(0);
                    let us = t.elapsed().as_micros() as u64;
                    if status == 503 || status == 0 {
                        unavailable.fetch_add(1, Ordering::Relaxed);
                    }
                    hists.lock().unwrap()[k].record(us.max(1)).ok();
                }
            }
        }));
    }
    let t0 = Instant::now();
    let mut closed_after = None;
    let mut s = summary(&client, &base, v).await?;
    while s["status"] != "awaiting_beacon" && s["status"] != "drawn" {
        tokio::time::sleep(Duration::from_millis(20)).await;
        s = summary(&client, &base, v).await?;
        ensure!(t0.elapsed() < Duration::from_secs(600), "not closed in 10 minutes: {s}");
    }
    closed_after.get_or_insert(t0.elapsed());
    let round = s["beacon"]["round"].as_i64().context("the round")?;
    let t1 = Instant::now();
    let resp = client
        .post(format!("{base}/api/v1/vouchers/{v}/raffle/beacon"))
        .json(&json!({"round": round, "signature": chain.sign(round)}))
        .send()
        .await?;
    ensure!(resp.status().as_u16() == 202, "the beacon: {}", resp.status());
    while s["status"] != "drawn" {
        tokio::time::sleep(Duration::from_millis(20)).await;
        s = summary(&client, &base, v).await?;
        ensure!(t1.elapsed() < Duration::from_secs(600), "not drawn in 10 minutes: {s}");
    }
    let drawn_after = t1.elapsed();
    done.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await?;
    }
    let closed_after = closed_after.unwrap_or_default();
    println!(
        "raffle of {} entries, {} winners: closed {:.0} ms after draw_at (seen by polling every 20 ms and a \
         summary up to 0.5 s old), drawn {:.0} ms after the beacon was accepted",
        s["entries"],
        s["winners"],
        closed_after.as_secs_f64() * 1e3,
        drawn_after.as_secs_f64() * 1e3
    );
    println!("requests during the close and the draw ({} readers):", args.readers);
    let hists = hists.lock().unwrap();
    for (k, h) in hists.iter().enumerate() {
        println!(
            "  {:<36} n={:<6} p50 {:>6.1} ms  p99 {:>6.1} ms  max {:>6.1} ms",
            KINDS[k],
            h.len(),
            h.value_at_quantile(0.5) as f64 / 1e3,
            h.value_at_quantile(0.99) as f64 / 1e3,
            h.max() as f64 / 1e3
        );
    }
    println!("  answered 503 or not at all: {}", unavailable.load(Ordering::Relaxed));
    Ok(())
}
