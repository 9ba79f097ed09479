//! Ranges of the durable counters (order ids, business numbers) reserved in
//! Postgres: concurrent callers over several pools (as several processes are)
//! never get one value twice, and together they use every value from 1 on.
use crate::helpers::*;
use futures::future::join_all;
use seckill::numbers::ranges::{reserve, Range};
use std::collections::HashSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reservations_from_many_pools_at_once_never_overlap() {
    let ns = Namespace::new().await;
    // Migrated by the application; then three pools of their own, as three processes.
    let app = TestApp::builder(&ns).worker(false).spawn().await;
    let url = ns.vars["DATABASE_URL"].clone();
    let mut pools = Vec::new();
    for _ in 0..3 {
        pools.push(sqlx::PgPool::connect(&url).await.unwrap());
    }
    let calls = (0..300u64).map(|i| {
        let pg = pools[(i % 3) as usize].clone();
        // Sizes 1 to 7, as a worker's batches and an id worker's blocks differ.
        tokio::spawn(async move { reserve(&pg, "ranges-test", 1 + i % 7).await.unwrap() })
    });
    let ranges: Vec<Range> = join_all(calls).await.into_iter().map(Result::unwrap).collect();
    let mut values: Vec<u64> = ranges.iter().flat_map(|r| r.first..=r.last).collect();
    let total: u64 = (0..300u64).map(|i| 1 + i % 7).sum();
    assert_eq!(values.len() as u64, total);
    let distinct: HashSet<u64> = values.iter().copied().collect();
    assert_eq!(distinct.len(), values.len(), "a value reserved twice");
    values.sort_unstable();
    assert_eq!(
        values,
        (1..=total).collect::<Vec<u64>>(),
        "every value from 1, none skipped"
    );
    // The mark is the top of every range: a new caller starts above it.
    let next = reserve(app.pg(), "ranges-test", 1).await.unwrap();
    assert_eq!(next.first, total + 1);
    for p in pools {
        p.close().await;
    }
}

/// Order ids of a process that stopped are never handed out by the next one: the
/// blocks live in Postgres, not in the process or in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_started_after_another_never_reissues_its_ids() {
    let ns = Namespace::new().await;
    let first = TestApp::builder(&ns).env("SECKILL_ID_BLOCK", "4").spawn().await;
    let v = first.flash_sale(100).await;
    let mut ids: Vec<i64> = accepted(&wave(&first, v, 1..=10).await).into_values().collect();
    drop(first);
    let second = TestApp::builder(&ns).env("SECKILL_ID_BLOCK", "4").spawn().await;
    ids.extend(accepted(&wave(&second, v, 11..=20).await).into_values());
    assert_eq!(ids.len(), 20, "every shopper got an order");
    let distinct: HashSet<i64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), 20, "an order id issued twice: {ids:?}");
}

/// `n` business numbers of the `order` rule for tenant 9.
async fn numbers(app: &TestApp, n: i64) -> Vec<String> {
    let (status, body) = app
        .post(
            "/api/v1/sequences/order/next",
            Some(&app.service()),
            serde_json::json!({"tenant_id": "9", "count": n}),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    body["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

/// Postgres going back in time (an asynchronous standby promoted, a restore)
/// forgets the ranges it reserved last: here every watermark is set back to 0.
/// The witness in Redis catches it: no number and no
/// order id is handed out twice, by the process that saw them or by one started
/// after; each catch is an incident.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_postgres_gone_back_in_time_reissues_no_number_and_no_id() {
    let ns = Namespace::new().await;
    let first = TestApp::builder(&ns)
        .env("SECKILL_ID_BLOCK", "3")
        .forces_incidents(&["postgres_went_back"])
        .spawn()
        .await;
    let v = first.flash_sale(100).await;
    let mut issued = numbers(&first, 5).await;
    let mut ids: Vec<i64> = accepted(&wave(&first, v, 1..=10).await).into_values().collect();
    let back = sqlx::query("UPDATE counter_watermarks SET high = 0")
        .execute(first.pg())
        .await
        .unwrap();
    assert!(back.rows_affected() >= 2, "the order ids' and the numbers' scopes");
    issued.extend(numbers(&first, 5).await);
    ids.extend(accepted(&wave(&first, v, 11..=20).await).into_values());
    // A process started after it knows nothing itself: Redis's witness does.
    sqlx::query("UPDATE counter_watermarks SET high = 0")
        .execute(first.pg())
        .await
        .unwrap();
    let second = TestApp::builder(&ns)
        .env("SECKILL_ID_BLOCK", "3")
        .forces_incidents(&["postgres_went_back"])
        .spawn()
        .await;
    issued.extend(numbers(&second, 5).await);
    ids.extend(accepted(&wave(&second, v, 21..=30).await).into_values());
    assert_eq!(issued.len(), 15);
    assert_eq!(
        issued.iter().collect::<HashSet<_>>().len(),
        15,
        "a number issued twice: {issued:?}"
    );
    assert_eq!(ids.len(), 30, "every shopper got an order");
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        30,
        "an order id issued twice: {ids:?}"
    );
    // Each process caught it (an incident).
    for app in [&first, &second] {
        let caught = app
            .metric("seckill_worker_incidents_total{kind=\"postgres_went_back\"}")
            .await;
        assert!(caught >= 1.0, "{caught}");
    }
    second.shutdown().await;
    first.shutdown().await;
}

/// The witness keeps what it saw compact: ranges reserved one after the other
/// are one member, so a busy scope costs Redis one entry, not one per call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_witness_keeps_a_scope_reserved_in_order_as_one_range() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    for _ in 0..20 {
        numbers(&app, 3).await;
    }
    let scope: String = sqlx::query_scalar("SELECT scope FROM counter_watermarks WHERE scope LIKE 'seq:order:9:%'")
        .fetch_one(app.pg())
        .await
        .unwrap();
    let key = app.app().state().handles.keys.counter_witness(&scope);
    let mut c = app.redis().await;
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg(&key)
        .arg(0)
        .arg(-1)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(members, vec!["1-60".to_owned()]);
    // Every kind of incident is on the page at 0 from the start (an alert's
    // `increase()` sees the first one).
    let text = app.metrics_text();
    for kind in seckill::metrics::INCIDENT_KINDS {
        assert!(
            text.contains(&format!("seckill_worker_incidents_total{{kind=\"{kind}\"}} 0")),
            "{kind}"
        );
    }
    app.shutdown().await;
}
