//! Rate limits (per shopper, per client address) and overload shedding (requests in
//! flight), all enforced in-process; health checks are exempt.
use crate::helpers::*;
use reqwest::StatusCode;
use std::io::Write;
use std::time::Duration;

#[tokio::test]
async fn a_shopper_over_the_limit_gets_429_with_retry_after() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns)
        .env("SECKILL_RATE_LIMIT_PER_USER", "2")
        .spawn()
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

/// What the instance answers alone (sold out from its flag, a sale not started)
/// comes before the per-shopper limit: a shopper who keeps asking is told so every
/// time, and takes no place in the limiter. The shopper who asks for a sale that
/// sells is limited as before.
#[tokio::test]
async fn refusals_the_instance_answers_alone_come_before_the_per_shopper_limit() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns)
        .env("SECKILL_RATE_LIMIT_PER_USER", "1")
        .spawn()
        .await;
    let sold = app.flash_sale(1).await;
    let now = chrono::Utc::now();
    let later = app
        .flash_sale_between(5, now + chrono::Duration::hours(1), now + chrono::Duration::hours(2))
        .await;
    assert_eq!(app.order(sold, 1).await.0, StatusCode::ACCEPTED);
    // The answer that sets this instance's flag, from Redis.
    assert_eq!(code(&app.order(sold, 2).await.1), "sold_out");
    // Three rounds: well within the flag's second of trust, so no probe (which goes
    // through the limiter, once a second) falls among them.
    for _ in 0..3 {
        assert_eq!(code(&app.order(sold, 3).await.1), "sold_out");
        assert_eq!(code(&app.order(later, 3).await.1), "sale_not_started");
    }
    let open = app.flash_sale(10).await;
    let answers: Vec<String> = futures::future::join_all((0..4).map(|_| app.order(open, 4)))
        .await
        .into_iter()
        .map(|(_, body)| code(&body).to_owned())
        .collect();
    assert!(answers.iter().any(|c| c == "rate_limited"), "{answers:?}");
    app.shutdown().await;
}

#[tokio::test]
async fn an_address_over_the_limit_gets_429_but_health_checks_do_not() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns)
        .env("SECKILL_RATE_LIMIT_PER_IP", "3")
        .spawn()
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

/// Health and metrics have a per-address budget of their own: a flood of them
/// from one address is refused with 429 (they bypassed every limit), while the
/// crowd's budget at its limit does not refuse them.
#[tokio::test]
async fn a_flood_of_health_and_metrics_requests_is_limited_on_a_budget_of_its_own() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns)
        .env("SECKILL_RATE_LIMIT_PER_IP", "3")
        .spawn()
        .await;
    // The crowd's budget of this address, spent.
    let spent = eventually(Duration::from_secs(5), || async {
        (app.get("/api/v1/vouchers?shop_id=1", None).await.0 == StatusCode::TOO_MANY_REQUESTS).then_some(())
    })
    .await;
    assert!(spent.is_some());
    assert_eq!(app.get("/health/ready", None).await.0, StatusCode::OK);
    let mut statuses = Vec::new();
    for path in ["/health/live", "/metrics"] {
        for _ in 0..(2 * seckill::http::rate_limits::PROBE_PER_IP) {
            statuses.push(app.get(path, None).await.0);
        }
    }
    let refused = statuses.iter().filter(|s| **s == StatusCode::TOO_MANY_REQUESTS).count();
    assert!(refused > 0, "{statuses:?}");
    assert!(
        statuses
            .iter()
            .all(|s| *s == StatusCode::OK || *s == StatusCode::TOO_MANY_REQUESTS),
        "{statuses:?}"
    );
    app.shutdown().await;
}

/// Holds one crowd request in flight (a service token's POST whose body never
/// arrives) until the sender is used or dropped; if it was answered instead (shed
/// itself, because another request was in flight when it arrived), holds a new one.
fn hold_one_in_flight(app: &TestApp) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let addr = app.addr.trim_start_matches("http://").to_owned();
    let service = app.service();
    let (let_go, held) = std::sync::mpsc::channel::<()>();
    let stalled = std::thread::spawn(move || loop {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            s,
            "POST /api/v1/sequences/held/next HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {service}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
        )
        .unwrap();
        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        // In flight until the test lets go (the connection closes with the thread).
        loop {
            if !matches!(held.try_recv(), Err(std::sync::mpsc::TryRecvError::Empty)) {
                return;
            }
            match std::io::Read::read(&mut s, &mut [0u8; 512]) {
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                _ => break,
            }
        }
    });
    (let_go, stalled)
}

/// One request held in flight fills an instance limited to one: the next request
/// is shed at once with 503 and Retry-After.
#[tokio::test]
async fn beyond_max_in_flight_requests_are_shed_with_503() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns).env("SECKILL_MAX_IN_FLIGHT", "1").spawn().await;
    let (let_go, stalled) = hold_one_in_flight(&app);
    let list = format!("{}/api/v1/vouchers?shop_id=1", app.addr);
    // Answered while the stalled request has not arrived yet; shed once it is in flight.
    let resp = eventually(Duration::from_secs(10), || async {
        let resp = app.client.get(&list).send().await.unwrap();
        (resp.status() == StatusCode::SERVICE_UNAVAILABLE).then_some(resp)
    })
    .await
    .expect("shed while another request is in flight");
    assert_eq!(resp.headers()["retry-after"], "1");
    assert_eq!(code(&resp.json().await.unwrap()), "unavailable");
    assert_eq!(
        app.get("/health/live", None).await.0,
        StatusCode::OK,
        "health is never shed"
    );
    let_go.send(()).unwrap();
    stalled.join().unwrap();
    // The stalled request is gone: requests are admitted again.
    let ok = eventually(Duration::from_secs(10), || async {
        (app.get("/api/v1/vouchers?shop_id=1", None).await.0 == StatusCode::OK).then_some(())
    })
    .await;
    assert!(ok.is_some());
    app.shutdown().await;
}

/// The admin has a budget of its own: while the crowd holds the in-flight cap, the
/// console loads and a pause succeeds; admin paths with a junk token share the
/// crowd's cap.
#[tokio::test]
async fn the_admin_pauses_while_the_crowd_holds_the_in_flight_cap() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns).env("SECKILL_MAX_IN_FLIGHT", "1").spawn().await;
    let v = app.flash_sale(5).await;
    let (let_go, stalled) = hold_one_in_flight(&app);
    let list = format!("{}/api/v1/vouchers?shop_id=1", app.addr);
    let shed = eventually(Duration::from_secs(10), || async {
        let resp = app.client.get(&list).send().await.unwrap();
        (resp.status() == StatusCode::SERVICE_UNAVAILABLE).then_some(())
    })
    .await;
    assert!(shed.is_some(), "the crowd's cap is full");
    let (status, body) = app.get("/api/v1/admin/vouchers/1", Some("junk")).await;
    assert_eq!((status, code(&body)), (StatusCode::SERVICE_UNAVAILABLE, "unavailable"));
    // Only the console's own files are the console's: any other path under /admin/
    // is the crowd's.
    let (status, body) = app.get("/admin/junk", None).await;
    assert_eq!((status, code(&body)), (StatusCode::SERVICE_UNAVAILABLE, "unavailable"));
    let (status, body) = app
        .post(
            &format!("/api/v1/admin/vouchers/{v}/pause"),
            Some(&app.admin()),
            serde_json::json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["paused"], true, "{body}");
    for _ in 0..3 {
        let resp = app.client.get(format!("{}/admin/", app.addr)).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
    }
    let_go.send(()).unwrap();
    stalled.join().unwrap();
    app.shutdown().await;
}
