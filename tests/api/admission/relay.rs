//! `a_raffle_draws_with_the_round_its_relay_publishes`: with `SECKILL_BEACON_URL`
//! naming a drand HTTP relay (here one of the test's own, serving its chain's
//! rounds once they are due, as drand does), a raffle is drawn without anyone
//! submitting the round.
use super::raffle::enter;
use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Serves `GET /public/<round>` as drand's relays do: the round's signature once
/// its time has come, 404 before. Returns its URL and its count of rounds served.
async fn relay(chain: Arc<TestChain>) -> (String, Arc<AtomicUsize>) {
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    let (url, _task) = crate::helpers::stub_http::serve(move |head| {
        let round = head
            .strip_prefix("GET /public/")
            .and_then(|rest| rest.split(' ').next())
            .and_then(|r| r.parse::<i64>().ok());
        match round.filter(|r| chain.round_at(*r) <= Utc::now().timestamp()) {
            Some(r) => {
                count.fetch_add(1, Ordering::SeqCst);
                ("200 OK", json!({"round": r, "signature": chain.sign(r)}).to_string())
            }
            None => ("404 Not Found", "{}".to_owned()),
        }
    })
    .await;
    (url, served)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_raffle_draws_with_the_round_its_relay_publishes() {
    let chain = Arc::new(TestChain::fast());
    let (url, served) = relay(chain.clone()).await;
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns).env("SECKILL_BEACON_URL", url).spawn().await;
    let draw_at = Utc::now() + chrono::Duration::seconds(4);
    let v = sale_with(
        &app,
        2,
        draw_at,
        draw_at + chrono::Duration::hours(1),
        json!({"admission": "raffle", "draw_at": draw_at.to_rfc3339(), "beacon": chain.field(None)}),
    )
    .await;
    for user in 1..=6 {
        assert_eq!(enter(&app.addr, &app.shopper(user), v).await.0, StatusCode::CREATED);
    }
    let drawn = eventually(Duration::from_secs(30), || async {
        let (_, s) = app.get(&format!("/api/v1/vouchers/{v}/raffle"), None).await;
        (s["status"] == "drawn").then_some(s)
    })
    .await
    .expect("drawn with the relay's round, nobody submitting it");
    let round = drawn["beacon"]["round"].as_i64().unwrap();
    assert_eq!(drawn["signature"], chain.sign(round), "{drawn}");
    assert_eq!(drawn["winners"], 2);
    assert!(served.load(Ordering::SeqCst) >= 1);
    app.shutdown().await;
}
