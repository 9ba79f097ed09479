//! Hostile traffic: floods of junk that must not hurt the sale. Junk paths and
//! made-up methods leave the metrics page small (its labels are bounded by the
//! code); a readiness flood leaves pay and admin answering; admin routes keep a
//! budget of their own while the crowd fills the in-flight cap; one shopper's pay
//! storm leaves other shoppers' requests alone; a scrape flood renders the
//! metrics page once a second.
use crate::helpers::*;
use futures::StreamExt;
use reqwest::{Method, StatusCode};

/// Sends every request (up to 32 at a time, each on a connection of its own, as a
/// script would: a reused connection may race the server closing it) and returns
/// the statuses (`None`: no answer).
async fn flood(app: &TestApp, requests: Vec<(Method, String)>) -> Vec<Option<StatusCode>> {
    let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let client = &client;
    futures::stream::iter(requests)
        .map(|(method, path)| async move {
            let resp = client.request(method, format!("{}{path}", app.addr)).send().await;
            resp.map(|r| r.status())
                .map_err(|e| eprintln!("{:?}", e.without_url()))
                .ok()
        })
        .buffer_unordered(32)
        .collect()
        .await
}

async fn metrics_page(app: &TestApp) -> String {
    let resp = app.client.get(format!("{}/metrics", app.addr)).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    resp.text().await.unwrap()
}

/// The flood: 300 GETs of a voucher "id" of 20,000 junk characters and 300
/// requests with made-up methods. The metrics page stays under 1 MB and the latency
/// histogram's series stay few (before: one series per request, 115 MB).
#[tokio::test]
async fn junk_paths_and_methods_leave_the_metrics_page_small() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let junk = "x".repeat(20_000);
    let mut requests: Vec<(Method, String)> = (0..300)
        .map(|i| (Method::GET, format!("/api/v1/vouchers/{junk}{i}")))
        .collect();
    requests.extend((0..300).map(|i| {
        let method = Method::from_bytes(format!("M{i}").as_bytes()).unwrap();
        (method, "/api/v1/vouchers".to_owned())
    }));
    let statuses = flood(&app, requests).await;
    let mut counts = std::collections::BTreeMap::new();
    for s in &statuses {
        *counts.entry(s.map(|s| s.as_u16())).or_insert(0) += 1;
    }
    assert!(
        statuses.iter().all(|s| s.is_some_and(|s| s.is_client_error())),
        "junk gets 4xx: {counts:?}"
    );
    let page = metrics_page(&app).await;
    assert!(page.len() < 1 << 20, "the metrics page is {} bytes", page.len());
    let series: Vec<&str> = page
        .lines()
        .filter(|l| l.starts_with("seckill_http_request_seconds_count{"))
        .collect();
    assert!(series.len() <= 10, "{} series: {series:#?}", series.len());
    assert!(
        series
            .iter()
            .any(|l| l.contains("method=\"other\"") && l.contains("route=\"unmatched\"")),
        "{series:#?}"
    );
    assert!(
        series
            .iter()
            .any(|l| l.contains("route=\"/api/v1/vouchers/{id}\"") && l.contains("status=\"400\"")),
        "{series:#?}"
    );
    app.shutdown().await;
}

/// 500 connections flooding `/health/ready`: readiness is served from memory
/// (the answers carry the time of the checks they report, at most one a second),
/// and pay and an admin read answer meanwhile.
#[tokio::test]
async fn a_readiness_flood_leaves_pay_and_admin_answering() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(10).await;
    let (status, body) = app.order(v, 5).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let order = body["order_id"].as_str().unwrap().to_owned();
    let shopper = app.shopper(5);
    let created = eventually(std::time::Duration::from_secs(20), || async {
        let (_, body) = app.get(&format!("/api/v1/orders/{order}"), Some(&shopper)).await;
        (body["status"] == "created").then_some(())
    })
    .await;
    assert!(created.is_some(), "the order is persisted");

    let stop = Arc::new(AtomicBool::new(false));
    let answers = Arc::new(AtomicUsize::new(0));
    let checked_at = Arc::new(Mutex::new(std::collections::HashSet::new()));
    let started = std::time::Instant::now();
    let mut flood = tokio::task::JoinSet::new();
    for _ in 0..500 {
        let (stop, answers, checked_at) = (stop.clone(), answers.clone(), checked_at.clone());
        let (client, url) = (app.client.clone(), format!("{}/health/ready", app.addr));
        flood.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let Ok(resp) = client.get(&url).send().await else {
                    continue;
                };
                let body: serde_json::Value = resp.json().await.unwrap_or_default();
                answers.fetch_add(1, Ordering::Relaxed);
                let at = body["checks"]["checked_at"].as_str().unwrap_or("none").to_owned();
                checked_at.lock().unwrap().insert(at);
            }
        });
    }
    // In full swing: more answers than connections.
    let swinging = eventually(std::time::Duration::from_secs(30), || async {
        (answers.load(Ordering::Relaxed) > 1000).then_some(())
    })
    .await;
    assert!(swinging.is_some(), "the flood is answered");
    let (status, body) = app
        .post(
            &format!("/api/v1/orders/{order}/pay"),
            Some(&shopper),
            serde_json::json!({}),
        )
        .await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("paid")),
        "{body}"
    );
    let (status, body) = app
        .get(&format!("/api/v1/admin/vouchers/{v}"), Some(&app.admin()))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    stop.store(true, Ordering::Relaxed);
    while flood.join_next().await.is_some() {}
    let secs = started.elapsed().as_secs() as usize;
    let distinct = checked_at.lock().unwrap().len();
    assert!(
        distinct <= secs + 2,
        "{distinct} different checks served in {secs} s to {} answers",
        answers.load(Ordering::Relaxed)
    );
    app.shutdown().await;
}

/// A flood of scrapes renders the metrics page once per `SECKILL_METRICS_RENDER_MS`
/// (a second by default, 3 s here): fifty reads in a row get one page, byte for byte, though each read is counted in the page's own
/// request latency series (a fresh render would differ); gzip is served to a
/// scraper that takes it (the same page, a fraction of its size); a period later
/// the page is rendered anew (before, every request rendered it: 0.5 to 1 MB each).
#[tokio::test]
async fn a_scrape_flood_renders_the_metrics_page_once_a_second() {
    use std::io::Read;
    let ns = Namespace::new().await;
    // Rendered every 3 s here: the fifty reads fit in one page on a slow machine.
    let every = std::time::Duration::from_secs(3);
    let app = TestApp::builder(&ns)
        .env("SECKILL_METRICS_RENDER_MS", every.as_millis().to_string())
        .spawn()
        .await;
    let first = metrics_page(&app).await;
    for _ in 0..50 {
        assert_eq!(
            metrics_page(&app).await,
            first,
            "a page rendered again within the second"
        );
    }
    assert_ne!(
        app.metrics_text(),
        first,
        "a render now differs: the reads were counted"
    );
    let resp = app
        .client
        .get(format!("{}/metrics", app.addr))
        .header("Accept-Encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-encoding"], "gzip");
    let gz = resp.bytes().await.unwrap();
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..]).read_to_string(&mut text).unwrap();
    assert_eq!(text, first, "the gzip is the same page");
    assert!(
        gz.len() * 3 < first.len(),
        "gzip: {} of {} bytes",
        gz.len(),
        first.len()
    );
    tokio::time::sleep(every + std::time::Duration::from_millis(50)).await;
    assert_ne!(metrics_page(&app).await, first, "rendered anew after its period");
    app.shutdown().await;
}
