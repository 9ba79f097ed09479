//! The operator's alert rules (`deploy/prometheus/alerts.yml`) and their runbook
//! (`docs/RUNBOOK.md`) against the service: every metric an expression uses is one
//! the service registers, every alert has its runbook section and says where it
//! is; and the Redis memory gauge the memory alerts read follows a real Redis.
use crate::fixtures::OwnRedis;
use crate::helpers::*;
use std::time::Duration;

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_alert_reads_registered_metrics_and_has_a_runbook_section() {
    let rules = std::fs::read_to_string(root().join("deploy/prometheus/alerts.yml")).unwrap();
    let runbook = std::fs::read_to_string(root().join("docs/RUNBOOK.md")).unwrap();
    let names = seckill::metrics::Metrics::new().names;
    let mut alerts = Vec::new();
    let mut exprs = 0;
    for line in rules.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("- alert: ") {
            alerts.push(name.to_owned());
            assert!(
                runbook.contains(&format!("\n## {name}\n")),
                "{name}: no runbook section"
            );
        }
        if let Some(url) = line.strip_prefix("runbook_url: ") {
            let last = alerts.last().expect("a runbook_url inside an alert");
            assert_eq!(url, format!("docs/RUNBOOK.md#{}", last.to_lowercase()));
        }
        if let Some(expr) = line.strip_prefix("expr: ") {
            exprs += 1;
            let used: Vec<&str> = expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("seckill_"))
                .collect();
            assert!(!used.is_empty(), "an expression without a seckill metric: {expr}");
            for metric in used {
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| metric.strip_suffix(s).filter(|b| names.iter().any(|n| n == b)))
                    .unwrap_or(metric);
                assert!(
                    names.iter().any(|n| n == base),
                    "{metric} is not a metric of the service: {names:?}"
                );
            }
        }
    }
    assert_eq!(exprs, alerts.len(), "one expression per alert");
    for wanted in [
        "SeckillSaleClosed",
        "SeckillIncident",
        "SeckillOutboxGrowing",
        "SeckillRelayLag",
        "SeckillDeadLetters",
        "SeckillRedisMemoryHigh",
    ] {
        assert!(alerts.iter().any(|a| a == wanted), "{wanted} missing");
    }
}

/// A Redis with a `maxmemory`: the gauge reads its used memory over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_memory_gauge_reads_the_masters_use_of_its_limit() {
    let ns = Namespace::new().await;
    let redis = OwnRedis::snapshots_only();
    let app = TestApp::builder(&ns).env("REDIS_URL", redis.url()).spawn().await;
    // No limit: the checks read the master and set nothing (the gauge stays 0).
    let checked = eventually(Duration::from_secs(10), || async {
        let (_, ready) = app.get("/health/ready", None).await;
        let masters = ready["checks"]["redis_masters"].clone();
        masters.is_object().then_some(masters)
    })
    .await
    .expect("the readiness checks read the masters");
    assert!(checked["memory_used_permille"].is_null(), "{checked}");
    assert_eq!(app.metric("seckill_redis_memory_used_ratio").await, 0.0);
    let client = redis::Client::open(redis.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("50mb")
        .query_async(&mut c)
        .await
        .unwrap();
    let used: String = redis::cmd("INFO").arg("memory").query_async(&mut c).await.unwrap();
    let used: f64 = used
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let expected = used / (50.0 * 1024.0 * 1024.0);
    let read = eventually(Duration::from_secs(10), || async {
        Some(app.metric("seckill_redis_memory_used_ratio").await).filter(|r| *r > 0.0)
    })
    .await
    .expect("the gauge set from the readiness checks");
    let (_, ready) = app.get("/health/ready", None).await;
    assert!(
        ready["checks"]["redis_masters"]["memory_used_permille"]
            .as_i64()
            .unwrap()
            > 0,
        "{ready}"
    );
    assert!((read - expected).abs() < 0.02, "read {read}, expected about {expected}");
    app.shutdown().await;
}
