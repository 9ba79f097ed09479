//! Redis going back in time in the same process: a master
//! that resyncs from a replica which fell behind, and is promoted again, keeps its
//! `run_id`. Its shards' sequences show that it went back: they are below what the
//! service saw (its own scripts' replies, the relays' floors in Postgres), and the
//! first call that touches the sale is refused and closes it. On Redis servers of
//! the test's own.
use crate::fixtures::{wait_until, OwnRedis};
use crate::helpers::*;
use reqwest::StatusCode;
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

/// A field of `INFO <section>` of a server of the test's own.
fn info(redis: &OwnRedis, section: &str, field: &str) -> String {
    let text = redis.cli(&["INFO", section]).expect("INFO");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_owned())
        .unwrap_or_else(|| panic!("INFO {section} has no {field}: {text}"))
}

fn port(redis: &OwnRedis) -> String {
    redis.url().rsplit(':').next().unwrap().to_owned()
}

/// Waits until the sale's persisted orders reach `n`.
async fn persisted(app: &TestApp, v: i64, n: usize) {
    let done = eventually(Duration::from_secs(60), || async {
        (app.stats(v).await["orders_persisted"] == n).then_some(())
    })
    .await;
    assert!(
        done.is_some(),
        "{n} orders persisted within 60 s: {}",
        app.stats(v).await
    );
}

/// The sequence of the sale's shard-0 point this application holds (its head).
fn floor(app: &TestApp, v: i64) -> i64 {
    app.app()
        .state()
        .recovery
        .histories
        .shard(&seckill::keys::shard_tag(v, 0, 1))
        .head()
        .map_or(0, |p| p.seq)
}

/// Master A, replica B. A sells to shoppers 1..=30 (B holds them); B is detached
/// (`REPLICAOF NO ONE`) and A sells to 31..=60, persisted; then A resyncs from B
/// (`REPLICAOF B`: A now holds B's older data, epoch marker included) and is
/// promoted again, same `run_id`. The first order after it must be refused (the
/// shard is behind) and the sale repaired before the crowd, which includes every
/// shopper who bought: none gets a second 202, nothing is stored `failed`, no
/// business number twice, live + remaining = stock, the audit balanced, no 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fail_back_in_the_same_process_is_noticed_and_sells_no_one_twice() {
    let ns = Namespace::new().await;
    let a = OwnRedis::aof_always();
    let b = OwnRedis::replica_of(&a);
    let app = TestApp::builder(&ns)
        .env("REDIS_URL", a.url())
        .env("SECKILL_ID_BLOCK", "5")
        .spawn()
        .await;
    let stock = 120i64;
    let v = app.flash_sale(stock).await;
    let run_id = info(&a, "server", "run_id");

    let first = accepted(&wave(&app, v, 1..=30).await);
    assert_eq!(first.len(), 30);
    persisted(&app, v, 30).await;
    // B holds everything A has done so far, then is detached.
    let offset: i64 = info(&a, "replication", "master_repl_offset").parse().unwrap();
    let caught_up = tokio::task::block_in_place(|| {
        wait_until(Duration::from_secs(10), || {
            info(&b, "replication", "slave_repl_offset").parse::<i64>().unwrap() >= offset
        })
    });
    assert!(caught_up, "B caught up with A");
    assert_eq!(b.cli(&["REPLICAOF", "NO", "ONE"]).as_deref(), Some("OK"));
    let b_seq: i64 = b
        .cli(&["GET", &ns.keys().seq_at(v, 0, 1)])
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);

    let second = accepted(&wave(&app, v, 31..=60).await);
    assert_eq!(second.len(), 30);
    persisted(&app, v, 60).await;
    assert!(floor(&app, v) > b_seq, "the service saw writes B does not have");

    // The fail-back: A takes B's older data, and is a master again.
    let replid = info(&a, "replication", "master_replid");
    assert_eq!(a.cli(&["REPLICAOF", "127.0.0.1", &port(&b)]).as_deref(), Some("OK"));
    let synced = tokio::task::block_in_place(|| {
        wait_until(Duration::from_secs(10), || {
            info(&a, "replication", "master_link_status") == "up"
        })
    });
    assert!(synced, "A resynced from B");
    // Read A's data while it is still B's replica: nothing but B writes to it then.
    // Once promoted, the guard may already have repaired it (the repair rebuilds the
    // sale from Postgres, shopper 45 included), so a read after the promotion races.
    let a_seq: i64 = a
        .cli(&["GET", &ns.keys().seq_at(v, 0, 1)])
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    assert_eq!(a_seq, b_seq, "A holds B's older sequence");
    assert_eq!(
        a.cli(&["HEXISTS", &ns.keys().buyers(v), "45"]).as_deref(),
        Some("0"),
        "A went back: it does not know shopper 45's order"
    );
    assert_eq!(a.cli(&["REPLICAOF", "NO", "ONE"]).as_deref(), Some("OK"));
    let promoted = std::time::Instant::now();
    assert_eq!(info(&a, "server", "run_id"), run_id, "the same process");
    assert_ne!(info(&a, "replication", "master_replid"), replid);

    // The first order after the promotion is refused: the shard is behind.
    let (status, body) = app.order(v, 45).await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "shopper 45 again, at once: {body}"
    );
    let repaired = repaired_after(&app, v, 0).await;
    println!(
        "fail-back: caught at the first order; repaired ({repaired}) {:.2} s after A was promoted",
        promoted.elapsed().as_secs_f64()
    );

    let crowd = wave(&app, v, 1..=400).await;
    let twice: Vec<i64> = accepted(&crowd).into_keys().filter(|u| *u <= 60).collect();
    let statuses: BTreeMap<u16, usize> = crowd.values().fold(BTreeMap::new(), |mut m, (s, _)| {
        *m.entry(s.as_u16()).or_default() += 1;
        m
    });
    let later = accepted(&crowd).len();
    let pg = app.pg().clone();
    eventually(Duration::from_secs(60), || {
        let pg = pg.clone();
        async move {
            let open: i64 = sqlx::query_scalar("SELECT count(*) FROM voucher_orders WHERE voucher_id = $1")
                .bind(v)
                .fetch_one(&pg)
                .await
                .ok()?;
            (open as usize >= 60 + later).then_some(())
        }
    })
    .await;
    let rows: Vec<(i64, String, Option<String>)> =
        sqlx::query_as("SELECT user_id, status, order_no FROM voucher_orders WHERE voucher_id = $1")
            .bind(v)
            .fetch_all(app.pg())
            .await
            .unwrap();
    let live = rows.iter().filter(|r| r.1 == "created" || r.1 == "paid").count();
    let failed = rows.iter().filter(|r| r.1 == "failed").count();
    let numbered = rows.iter().filter(|r| r.2.is_some()).count();
    let remaining = app.stats(v).await["stock_remaining"].as_i64().unwrap();
    println!(
        "fail-back: crowd {statuses:?}, second 202s {}, stored {}, live {live}, failed {failed}, numbered {}, redis remaining {remaining}",
        twice.len(),
        rows.len(),
        numbered
    );
    assert!(twice.is_empty(), "shoppers sold twice after the fail-back: {twice:?}");
    assert_eq!(failed, 0, "orders stored failed");
    assert_eq!(statuses.get(&500), None, "no 500: {statuses:?}");
    assert_eq!(numbered, rows.len(), "every stored order has its business number");
    assert_eq!(live as i64 + remaining, stock, "live orders + remaining = stock");
    assert_eq!(live as i64, stock, "the whole stock sold");
    assert_balanced(&app, v).await;
    assert_no_incidents("fail-back in the same process", &[&app.addr]).await;
    let answered: HashSet<StatusCode> = crowd.values().map(|(s, _)| *s).collect();
    assert!(answered.contains(&StatusCode::ACCEPTED), "the crowd bought");
}

/// Checks that race each other and the crowd never take a healthy shard for one
/// that went back: two instances on one namespace, each asked again and again to
/// check the sale (as when a process reports it lost) while shoppers buy on both.
/// Every check finds each shard at or above every floor (a floor is only ever a
/// sequence some reply carried, and sequences only grow): no repair, every order
/// persisted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn checks_racing_the_crowd_raise_no_false_alarm() {
    let ns = Namespace::new().await;
    let a = TestApp::spawn(&ns).await;
    let b = TestApp::builder(&ns).api_only().spawn().await;
    let v = a.flash_sale(100).await;
    eventually(Duration::from_secs(5), || async {
        b.app().state().handles.cache.get(v).is_some().then_some(())
    })
    .await
    .expect("the second instance learns of the sale");
    let until = std::time::Instant::now() + Duration::from_secs(3);
    let mut checkers = Vec::new();
    for app in [&a, &b] {
        let recovery = app.app().state().recovery.clone();
        checkers.push(tokio::spawn(async move {
            let mut n = 0u32;
            while std::time::Instant::now() < until {
                recovery.lost(v, "a test's false alarm");
                recovery.round().await.expect("a check");
                n += 1;
            }
            n
        }));
    }
    let answers = wave(&b, v, 1..=50).await;
    let more = wave(&a, v, 51..=100).await;
    let bought = accepted(&answers).len() + accepted(&more).len();
    let mut checks = 0;
    for c in checkers {
        checks += c.await.unwrap();
    }
    println!("racing checks: {checks} checks, {bought} bought");
    assert_eq!(repairs_of(&a, v).await, 0, "no repair");
    assert!(checks > 10, "the checks ran ({checks})");
    // Every shopper whose order met an open sale bought; a check in progress may
    // have closed the sale in this process for a moment (503): those buy now.
    let rest: Vec<i64> = (1..=100)
        .filter(|u| !accepted(&answers).contains_key(u) && !accepted(&more).contains_key(u))
        .collect();
    let mut total = bought;
    for u in rest {
        let (status, body) = selling_again(&a, v, u).await;
        assert_eq!(status, StatusCode::ACCEPTED, "shopper {u}: {body}");
        total += 1;
    }
    assert_eq!(total, 100);
    persisted(&a, v, 100).await;
    assert_balanced(&a, v).await;
}
