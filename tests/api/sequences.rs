//! Business numbers: daily counters per rule and tenant, consecutive and never issued
//! twice (across instances, whatever Redis does), restarting at local
//! midnight of the rule's zone; clear errors for bad rules and requests.
use crate::helpers::*;
use chrono::{DateTime, TimeZone, Utc};
use futures::future::join_all;
use reqwest::StatusCode;
use seckill::app::Mode;
use seckill::clock::Clock;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::Arc;

async fn put_rule(app: &TestApp, name: &str, body: Value) -> (StatusCode, Value) {
    app.request(
        reqwest::Method::PUT,
        &format!("/api/v1/admin/sequences/{name}"),
        Some(&app.admin()),
        Some(body),
    )
    .await
}

async fn next(app: &TestApp, name: &str, tenant: i64, count: i64) -> Vec<String> {
    let (status, body) = app
        .post(
            &format!("/api/v1/sequences/{name}/next"),
            Some(&app.service()),
            json!({"tenant_id": tenant.to_string(), "count": count}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

fn counter(n: &str, prefix_and_date: usize) -> u64 {
    n[prefix_and_date..].parse().unwrap()
}

/// 100 concurrent callers, spread over two application instances.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_callers_on_two_instances_get_distinct_consecutive_numbers() {
    let ns = Namespace::new().await;
    let a = Arc::new(TestApp::spawn(&ns).await);
    let b = Arc::new(TestApp::builder(&ns).mode(Mode::Serve).spawn().await);
    let (status, _) = put_rule(
        &a,
        "yd",
        json!({"prefix": "YD", "date_format": "yyMMdd", "min_width": 3, "time_zone": "Asia/Shanghai"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let calls = (0..100).map(|i| {
        let app = if i % 2 == 0 { a.clone() } else { b.clone() };
        tokio::spawn(async move { next(&app, "yd", 1, 1).await })
    });
    let values: Vec<String> = join_all(calls).await.into_iter().flat_map(|r| r.unwrap()).collect();
    let distinct: HashSet<&String> = values.iter().collect();
    assert_eq!(distinct.len(), 100, "no number twice");
    let mut counters: Vec<u64> = values.iter().map(|v| counter(v, 8)).collect();
    counters.sort_unstable();
    assert_eq!(counters, (1..=100).collect::<Vec<u64>>(), "consecutive from 1");
    let today = Utc::now()
        .with_timezone(&chrono_tz::Asia::Shanghai)
        .format("%y%m%d")
        .to_string();
    assert!(
        values
            .iter()
            .all(|v| v.starts_with(&format!("YD{today}")) && v.len() == 11),
        "{values:?}"
    );
}

/// Batches taken at once on two instances (as the worker numbers its batches): each
/// batch consecutive, and together every number from 1 once, across the points
/// where the counter's reserved range runs out and is extended.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_batches_on_two_instances_leave_no_gap() {
    let ns = Namespace::new().await;
    let a = Arc::new(TestApp::spawn(&ns).await);
    let b = Arc::new(TestApp::builder(&ns).mode(Mode::Serve).spawn().await);
    let (status, _) = put_rule(
        &a,
        "bt",
        json!({"prefix": "BT", "date_format": "yyyyMMdd", "min_width": 6, "time_zone": "UTC"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let mut all: Vec<u64> = Vec::new();
    for _ in 0..3 {
        let calls = (0..8).map(|i| {
            let app = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move { next(&app, "bt", 1, 300).await })
        });
        for batch in join_all(calls).await {
            let batch: Vec<u64> = batch.unwrap().iter().map(|v| counter(v, 10)).collect();
            assert_eq!(batch.len(), 300);
            assert!(
                batch.windows(2).all(|w| w[1] == w[0] + 1),
                "a batch with a gap: {batch:?}"
            );
            all.extend(batch);
        }
    }
    all.sort_unstable();
    assert_eq!(all, (1..=7200).collect::<Vec<u64>>(), "every number from 1, once");
}

#[tokio::test]
async fn tenants_are_independent_and_a_batch_is_consecutive() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    put_rule(
        &app,
        "wb",
        json!({"prefix": "WB", "date_format": "yyyyMMdd", "min_width": 4, "time_zone": "UTC"}),
    )
    .await;
    for _ in 0..100 {
        next(&app, "wb", 1, 1).await;
    }
    let first_of_other = next(&app, "wb", 2, 1).await;
    assert!(first_of_other[0].ends_with("0001"), "{first_of_other:?}");
    let batch = next(&app, "wb", 1, 1000).await;
    assert_eq!(batch.len(), 1000);
    assert!(batch[0].ends_with("0101"), "{}", batch[0]);
    assert!(batch[999].ends_with("1100"), "{}", batch[999]);
    for pair in batch.windows(2) {
        assert_eq!(counter(&pair[1], 10), counter(&pair[0], 10) + 1);
    }
    app.shutdown().await;
}

/// 23:59:59.999 local time on the given day.
fn last_ms_of(tz: chrono_tz::Tz, y: i32, m: u32, d: u32) -> DateTime<Utc> {
    tz.with_ymd_and_hms(y, m, d, 23, 59, 59).single().unwrap().to_utc() + chrono::Duration::milliseconds(999)
}

/// The day changes at local midnight of the rule's zone, also on a day when the
/// clocks change (New York leaves daylight saving on 2026-11-01; the next day is
/// 25 hours long).
#[tokio::test]
async fn the_counter_restarts_at_local_midnight_of_the_rules_zone() {
    let ns = Namespace::new().await;
    let clock = Clock::manual(Utc::now());
    let app = TestApp::builder(&ns)
        .mode(Mode::Serve)
        .clock(clock.clone())
        .spawn()
        .await;
    for (zone, tz) in [
        ("Asia/Shanghai", chrono_tz::Asia::Shanghai),
        ("America/New_York", chrono_tz::America::New_York),
    ] {
        let name = format!("r{}", zone.len());
        put_rule(
            &app,
            &name,
            json!({"prefix": "N", "date_format": "yyyyMMdd", "min_width": 2, "time_zone": zone}),
        )
        .await;
        // A tenant per day, so that each day's numbers start from a clean count.
        for (tenant, (y, m, d)) in [(2026, 10, 31), (2026, 11, 1)].into_iter().enumerate() {
            let tenant = tenant as i64 + 1;
            clock.set(last_ms_of(tz, y, m, d));
            let before = next(&app, &name, tenant, 2).await;
            assert_eq!(
                before,
                [format!("N{y}{m:02}{d:02}01"), format!("N{y}{m:02}{d:02}02")],
                "{zone}"
            );
            clock.set(last_ms_of(tz, y, m, d) + chrono::Duration::milliseconds(1));
            let after = next(&app, &name, tenant, 1).await;
            let tomorrow = chrono::NaiveDate::from_ymd_opt(y, m, d).unwrap().succ_opt().unwrap();
            assert_eq!(after, [format!("N{}01", tomorrow.format("%Y%m%d"))], "{zone}");
        }
    }
    app.shutdown().await;
}

/// Numbers come from Postgres alone: they are issued, none twice, while the
/// instance's Redis is killed and while it comes back empty (where a Redis counter
/// would have answered 503, or 500 while Redis was not verified).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numbers_need_no_redis_and_are_never_issued_twice() {
    let ns = Namespace::new().await;
    let mut redis = crate::fixtures::OwnRedis::snapshots_only();
    let app = TestApp::builder(&ns)
        .env("REDIS_URL", redis.url())
        .env("SECKILL_REDIS_CLUSTER", "false")
        .spawn()
        .await;
    put_rule(
        &app,
        "lost",
        json!({"prefix": "L", "date_format": "yyyyMMdd", "min_width": 6, "time_zone": "UTC"}),
    )
    .await;
    let mut seen: HashSet<String> = HashSet::new();
    let mut take = |values: Vec<String>| {
        for v in values {
            assert!(seen.insert(v.clone()), "{v} issued twice");
        }
    };
    take(next(&app, "lost", 9, 250).await);
    // Down: nothing answers on its port.
    crate::fixtures::signal(redis.process(), "STOP");
    take(next(&app, "lost", 9, 250).await);
    crate::fixtures::signal(redis.process(), "CONT");
    // Back with nothing (no persistence): every key gone.
    redis.crash_and_restart();
    take(next(&app, "lost", 9, 250).await);
    let mut counters: Vec<u64> = seen.iter().map(|v| counter(v, 9)).collect();
    counters.sort_unstable();
    assert_eq!(counters, (1..=750).collect::<Vec<u64>>(), "consecutive, none twice");
    app.shutdown().await;
}

#[tokio::test]
async fn bad_rules_and_requests_get_clear_errors() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let good = json!({"prefix": "P", "date_format": "yyyyMMdd", "min_width": 4, "time_zone": "UTC"});
    for (field, value) in [
        ("date_format", json!("yyyyQQ")),
        ("time_zone", json!("Mars/Base")),
        ("prefix", json!("")),
        ("min_width", json!(0)),
        ("min_width", json!(19)),
    ] {
        let mut body = good.clone();
        body[field] = value;
        let (status, resp) = put_rule(&app, "r", body).await;
        assert_eq!(
            (status, code(&resp)),
            (StatusCode::BAD_REQUEST, "validation_failed"),
            "{field}"
        );
        assert!(resp["error"]["message"].as_str().unwrap().starts_with(field));
    }
    let (status, rule) = put_rule(&app, "r", good).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(rule["prefix"], "P");
    for count in [json!(0), json!(1001), json!("x")] {
        let (status, body) = app
            .post(
                "/api/v1/sequences/r/next",
                Some(&app.service()),
                json!({"tenant_id": "1", "count": count}),
            )
            .await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::BAD_REQUEST, "validation_failed"),
            "{count}"
        );
    }
    let (status, body) = app
        .post(
            "/api/v1/sequences/nope/next",
            Some(&app.service()),
            json!({"tenant_id": "1", "count": 1}),
        )
        .await;
    assert_eq!((status, code(&body)), (StatusCode::NOT_FOUND, "sequence_not_found"));
    // A name no rule can have (here a NUL character, which Postgres refuses to
    // compare: a 500 once) is the request's fault.
    for name in ["%00", "UPPER", "a%20b"] {
        let (status, body) = app
            .post(
                &format!("/api/v1/sequences/{name}/next"),
                Some(&app.service()),
                json!({"tenant_id": "1"}),
            )
            .await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::BAD_REQUEST, "validation_failed"),
            "{name}: {body}"
        );
    }
    // JSON Schema's integer includes 2.0.
    let (status, body) = app
        .post(
            "/api/v1/sequences/r/next",
            Some(&app.service()),
            json!({"tenant_id": 1.0, "count": 2.0}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["values"].as_array().unwrap().len(), 2);
    let (status, body) = app
        .post(
            "/api/v1/sequences/r/next",
            Some(&app.shopper(3)),
            json!({"tenant_id": "1", "count": 1}),
        )
        .await;
    assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "forbidden"));
    let (status, body) = put_rule(&app, "r", json!({"prefix": "P"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = app
        .request(
            reqwest::Method::PUT,
            "/api/v1/admin/sequences/r",
            Some(&app.service()),
            Some(json!({})),
        )
        .await;
    assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "forbidden"));
    app.shutdown().await;
}
