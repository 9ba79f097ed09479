//! Routine faults, mixed, under a steady crowd: two in-process `serve` instances,
//! two `seckill worker` processes and a Redis server of the test's own (AOF, fsync
//! always). Every 2 s a fault drawn from a seeded sequence: a worker killed -9 (and
//! a new one started), a worker or both frozen for 1–3 s, Redis killed and
//! restarted with its data, or both at once (a restart while a worker is frozen
//! holding orders, which is what once sold shoppers twice); at least one Redis
//! restart in every run. Each fault lands once requests are in flight and
//! acknowledged orders are not yet in Postgres (`Landing::lands`), and
//! the run fails if they never are. The seeds are a fixed list ([`SEEDS`];
//! `TEST_FAULT_SEEDS` names others), each printed.
//!
//! Asserts: no shopper ever gets a second 202 (earlier buyers keep trying), no
//! answer but 202, 409 and 503 (never a 500), every acknowledged order stored
//! `created` once and numbered, Postgres's stock 0 once sold out, the
//! audit balanced; and that the sale was shut (every answer in a half-second 503)
//! for at most a tenth of the run, Redis's own down time included (a loose bound
//! for a machine CI shares: the benchmark, `scripts/bench-nemesis.sh`, holds the
//! longer run to 2 %). Prints how long the sale was closed.
use crate::faults::crowd::Landing;
use crate::fixtures::{signal, spawn_worker_binary, OwnRedis};
use crate::helpers::*;
use reqwest::StatusCode;
use std::collections::{HashMap, HashSet};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// splitmix64: a seeded sequence, enough to pick faults reproducibly.
struct Seq(u64);

impl Seq {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    }
}

/// The worker processes, killed when the test ends, also when an assertion fails.
struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for w in &mut self.0 {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}

#[derive(Default)]
struct Book {
    /// Shopper -> the order id of their one 202.
    bought: HashMap<i64, i64>,
    /// Shoppers answered 503 and never 202: their order may exist all the same (the
    /// script ran, its answer was lost with the connection when Redis was killed).
    unsure: HashSet<i64>,
    counts: HashMap<u16, u64>,
    /// 100 ms buckets (since the start) in which some answer was 503.
    closed: HashSet<u64>,
    /// Per half-second since the start: (answers, 503 answers).
    halves: HashMap<u64, (u64, u64)>,
}

/// The seeds a run takes unless `TEST_FAULT_SEEDS` (comma-separated) names
/// others: fixed, so that every run meets the same faults at the same steps (a
/// failure replays), one because each takes most of a minute.
const SEEDS: &[u64] = &[0x5eed_0057];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_minute_of_mixed_faults_sells_no_one_twice_and_loses_nothing() {
    let seeds: Vec<u64> = match std::env::var("TEST_FAULT_SEEDS") {
        Ok(list) => list
            .split(',')
            .map(|s| s.trim().parse().expect("TEST_FAULT_SEEDS: comma-separated integers"))
            .collect(),
        Err(_) => SEEDS.to_vec(),
    };
    for seed in seeds {
        println!("mixed faults: seed {seed} (TEST_FAULT_SEEDS={seed} runs it alone)");
        a_minute_of(seed).await;
    }
}

async fn a_minute_of(seed: u64) {
    let mut seq = Seq(seed);
    let mut redis = OwnRedis::aof_always();
    let ns = Namespace::new().await;
    let serve = || {
        TestApp::builder(&ns)
            .env("REDIS_URL", redis.url())
            .env("SECKILL_WORKER_HOLD_MS", "1000")
            .worker(false)
            .spawn()
    };
    let a = Arc::new(serve().await);
    let b = Arc::new(serve().await);
    // More than the lanes buy while the faults go on (24 s and the last fault's
    // length, at up to about 160 new orders a second): every fault lands while
    // orders are still being sold.
    let stock = 6000i64;
    let v = a.flash_sale(stock).await;
    let env = [("REDIS_URL", redis.url()), ("SECKILL_REDIS_CLUSTER", "false".into())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut workers = Workers(vec![
        spawn_worker_binary(&ns, &env).await,
        spawn_worker_binary(&ns, &env).await,
    ]);

    let book = Arc::new(Mutex::new(Book::default()));
    // What the lanes have in flight, read as each fault lands.
    let landing = Landing::new(a.pg(), v);
    let start = Instant::now();
    let stop = tokio_util::sync::CancellationToken::new();
    let mut crowd = Vec::new();
    for lane in 0..8i64 {
        let (a, b, book, stop, landing) = (a.clone(), b.clone(), book.clone(), stop.clone(), landing.clone());
        crowd.push(tokio::spawn(async move {
            let mut n = 0i64;
            while !stop.is_cancelled() {
                n += 1;
                // Mostly new shoppers; every fifth request an earlier buyer again.
                let user = {
                    let book = book.lock().unwrap();
                    // Earlier buyers, and shoppers whose order may exist, try again.
                    let earlier = (n % 5 == 0)
                        .then(|| {
                            let pool = book.bought.len() + book.unsure.len();
                            let k = (n as usize * 7) % pool.max(1);
                            book.bought.keys().chain(book.unsure.iter()).nth(k).copied()
                        })
                        .flatten();
                    earlier.unwrap_or(1 + lane + 8 * n)
                };
                let app = if n % 2 == 0 { &a } else { &b };
                landing.sending();
                let (status, body) = app.order(v, user).await;
                landing.answered(
                    (status == StatusCode::ACCEPTED)
                        .then(|| body["order_id"].as_str()?.parse().ok())
                        .flatten(),
                );
                {
                    let mut book = book.lock().unwrap();
                    *book.counts.entry(status.as_u16()).or_default() += 1;
                    let half = book.halves.entry(start.elapsed().as_millis() as u64 / 500).or_default();
                    half.0 += 1;
                    half.1 += u64::from(status == StatusCode::SERVICE_UNAVAILABLE);
                    match status {
                        StatusCode::ACCEPTED => {
                            let id: i64 = body["order_id"].as_str().unwrap().parse().unwrap();
                            if let Some(first) = book.bought.insert(user, id) {
                                panic!("shopper {user} got a second 202 ({id}; first {first})");
                            }
                            book.unsure.remove(&user);
                        }
                        StatusCode::CONFLICT | StatusCode::SERVICE_UNAVAILABLE => {
                            if status == StatusCode::SERVICE_UNAVAILABLE {
                                book.closed.insert(start.elapsed().as_millis() as u64 / 100);
                                if !book.bought.contains_key(&user) {
                                    book.unsure.insert(user);
                                }
                            }
                        }
                        other => panic!("shopper {user}: {other} {body}"),
                    }
                }
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
        }));
    }

    let faults_until = start + Duration::from_secs(24);
    let mut log = Vec::new();
    let mut restarted_redis = false;
    while Instant::now() < faults_until {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let w = seq.next(2) as usize;
        let freeze = Duration::from_millis(1000 + seq.next(2000));
        let kind = seq.next(5);
        restarted_redis |= kind >= 3;
        // Each fault lands on work in flight: a request sent and not answered, and
        // an acknowledged order not yet in Postgres.
        let landed = landing.lands().await;
        assert!(
            landed.requests > 0 && landed.unpersisted > 0,
            "fault {} landed with nothing in flight: {landed:?}",
            log.len() + 1
        );
        match kind {
            0 => {
                log.push(format!("kill -9 worker {w}"));
                let _ = workers.0[w].kill();
                let _ = workers.0[w].wait();
                workers.0[w] = spawn_worker_binary(&ns, &env).await;
            }
            1 => {
                log.push(format!("freeze worker {w} {} ms", freeze.as_millis()));
                signal(&workers.0[w], "STOP");
                tokio::time::sleep(freeze).await;
                signal(&workers.0[w], "CONT");
            }
            2 => {
                log.push(format!("freeze both workers {} ms", freeze.as_millis()));
                workers.0.iter().for_each(|c| signal(c, "STOP"));
                tokio::time::sleep(freeze).await;
                workers.0.iter().for_each(|c| signal(c, "CONT"));
            }
            3 => {
                log.push("restart Redis".into());
                redis.crash_and_restart();
            }
            _ => {
                log.push(format!(
                    "restart Redis while worker {w} is frozen {} ms",
                    freeze.as_millis()
                ));
                signal(&workers.0[w], "STOP");
                redis.crash_and_restart();
                tokio::time::sleep(freeze).await;
                signal(&workers.0[w], "CONT");
            }
        }
    }
    // Every run restarts Redis at least once: once more at the end if the seed
    // drew no restart.
    if !restarted_redis {
        let landed = landing.lands().await;
        assert!(
            landed.requests > 0 && landed.unpersisted > 0,
            "the last fault landed with nothing in flight: {landed:?}"
        );
        log.push("restart Redis".into());
        redis.crash_and_restart();
    }
    println!("faults: {}", log.join("; "));
    assert!(
        log.iter().any(|f| f.contains("restart Redis")),
        "Redis was restarted: {log:?}"
    );
    // The crowd goes on until the whole stock is stored (orders whose 202 was lost
    // count: they were admitted).
    let sold_out = eventually(Duration::from_secs(90), || async {
        (stored_orders(&a, v).await? >= stock).then_some(())
    })
    .await;
    stop.cancel();
    for t in crowd {
        t.await.unwrap();
    }
    let ran_halves = start.elapsed().as_millis() as u64 / 500;
    let book = Arc::try_unwrap(book).ok().unwrap().into_inner().unwrap();
    let shut = (0..ran_halves)
        .filter(|h| book.halves.get(h).is_some_and(|(n, refused)| *n > 0 && n == refused))
        .count();
    println!(
        "the sale was shut (every answer 503) in {shut} of {ran_halves} half-seconds ({:.1} %)",
        100.0 * shut as f64 / ran_halves.max(1) as f64
    );
    println!(
        "answers {:?}; {} acknowledged, {:?} stored, of {stock}; the sale answered 503 in {} of {} 100-ms slices ({:.1} s closed)",
        book.counts,
        book.bought.len(),
        stored_orders(&a, v).await,
        book.closed.len(),
        start.elapsed().as_millis() / 100,
        book.closed.len() as f64 / 10.0
    );
    assert!(
        sold_out.is_some(),
        "the whole stock was sold and stored after the faults"
    );
    assert!(
        shut as u64 * 10 <= ran_halves,
        "the sale was shut {shut} of {ran_halves} half-seconds (more than a tenth)"
    );
    let rows: Vec<(i64, i64, String, Option<String>)> =
        sqlx::query_as("SELECT id, user_id, status, order_no FROM voucher_orders WHERE voucher_id = $1")
            .bind(v)
            .fetch_all(a.pg())
            .await
            .unwrap();
    assert_eq!(rows.len() as i64, stock, "exactly the stock stored");
    let stored: HashMap<i64, i64> = rows.iter().map(|r| (r.0, r.1)).collect();
    for (user, id) in &book.bought {
        assert_eq!(
            stored.get(id),
            Some(user),
            "shopper {user}'s acknowledged order {id} stored as theirs"
        );
    }
    // Stored without a 202: only shoppers whose answer was 503 (the script ran, its
    // answer was lost), never one who was told anything else.
    let unacknowledged: Vec<i64> = rows
        .iter()
        .filter(|r| book.bought.get(&r.1) != Some(&r.0))
        .map(|r| r.1)
        .collect();
    for user in &unacknowledged {
        assert!(
            book.unsure.contains(user),
            "shopper {user} has a stored order but was never answered 202 or 503"
        );
    }
    println!("stored after a lost answer (503): {}", unacknowledged.len());
    // A shopper sold twice is refused by a unique index and stored `failed`; a
    // number or id issued twice is renumbered and counted as an incident (the
    // workers' INCIDENT lines are read when the namespace ends). The API-side
    // check is the lanes' "no second 202".
    let failed: Vec<_> = rows.iter().filter(|r| r.2 != "created").collect();
    assert!(failed.is_empty(), "nothing failed: {failed:?}");
    assert!(
        rows.iter().all(|r| r.3.is_some()),
        "every stored order has its business number"
    );
    let pg_stock: i32 = sqlx::query_scalar("SELECT stock FROM seckill_vouchers WHERE voucher_id = $1")
        .bind(v)
        .fetch_one(a.pg())
        .await
        .unwrap();
    assert_eq!(pg_stock, 0, "persisted + remaining = stock");
    assert_balanced(&a, v).await;
    drop(workers);
}
