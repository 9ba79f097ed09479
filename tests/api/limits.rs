//! Issue 7 (part): rate limits and overload shedding, enforced in-process.
use crate::helpers::*;
use reqwest::StatusCode;
use seckill::app::{Mode, Options};
use std::io::Write;
use std::time::Duration;

#[tokio::test]
async fn a_shopper_over_the_limit_gets_429_with_retry_after() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn_with(
        &ns,
        &[("SECKILL_RATE_LIMIT_PER_USER", "2")],
        Options::default(),
        Mode::All,
    )
    .await;
    let v = app.flash_sale(10).await;
    let token = app.shopper(77);
    let mut limited = None;
    for _ in 0..5 {
        let resp = app
            .client
            .post(format!("{}/api/v1/vouchers/{v}/orders", app.addr))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        if resp.status() == StatusCode::TOO_MANY_REQUESTS {
            let retry: u64 = resp.headers()["retry-after"].to_str().unwrap().parse().unwrap();
            limited = Some((retry, resp.json::<serde_json::Value>().await.unwrap()));
            break;
        }
    }
    let (retry, body) = limited.expect("the third request within a second is limited");
    assert!(retry >= 1);
    assert_eq!(code(&body), "rate_limited");
    // Another shopper is not affected.
    assert_eq!(app.order(v, 78).await.0, StatusCode::ACCEPTED);
    app.shutdown().await;
}

#[tokio::test]
async fn an_address_over_the_limit_gets_429_but_health_checks_do_not() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn_with(
        &ns,
        &[("SECKILL_RATE_LIMIT_PER_IP", "3")],
        Options::default(),
        Mode::All,
    )
    .await;
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(app.get("/api/v1/vouchers?shop_id=1", None).await.0);
    }
    assert!(statuses.contains(&StatusCode::TOO_MANY_REQUESTS), "{statuses:?}");
    for _ in 0..10 {
        assert_eq!(app.get("/health/live", None).await.0, StatusCode::OK);
    }
    app.shutdown().await;
}

/// One request held in flight (its body never arrives) fills an instance limited to
/// one: the next request is shed at once with 503 and Retry-After.
#[tokio::test]
async fn beyond_max_in_flight_requests_are_shed_with_503() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn_with(&ns, &[("SECKILL_MAX_IN_FLIGHT", "1")], Options::default(), Mode::All).await;
    let addr = app.addr.trim_start_matches("http://").to_owned();
    let admin = app.admin();
    let stalled = std::thread::spawn(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(
            s,
            "POST /api/v1/admin/vouchers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {admin}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
        )
        .unwrap();
        std::thread::sleep(Duration::from_secs(3));
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resp = app
        .client
        .get(format!("{}/api/v1/vouchers?shop_id=1", app.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.headers()["retry-after"], "1");
    assert_eq!(code(&resp.json().await.unwrap()), "unavailable");
    assert_eq!(
        app.get("/health/live", None).await.0,
        StatusCode::OK,
        "health is never shed"
    );
    stalled.join().unwrap();
    // The stalled request is gone: requests are admitted again.
    let ok = eventually(Duration::from_secs(10), || async {
        (app.get("/api/v1/vouchers?shop_id=1", None).await.0 == StatusCode::OK).then_some(())
    })
    .await;
    assert!(ok.is_some());
    app.shutdown().await;
}
