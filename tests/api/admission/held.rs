//! No request waits on a raffle's draw or a queue's seal: while a test holds the
//! lock either takes, requests on that sale and on others are all answered (the
//! result so far, or 503 with Retry-After) before the test lets the lock go.
//! Proven by ordering: the answers come while the lock is still held (a client
//! timeout only bounds how long the test waits for a server that would hang).
use super::raffle::enter;
use super::*;
use std::time::Duration;

/// A client whose requests give up after 20 s: a request still waiting then
/// waits on the lock the test holds.
fn impatient() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// (path, status) of each request, answered or not (None: no answer in 20 s).
async fn answers(
    client: &reqwest::Client,
    base: &str,
    requests: Vec<(reqwest::Method, String, Option<String>)>,
) -> Vec<(String, Option<StatusCode>)> {
    futures::future::join_all(requests.into_iter().map(|(method, path, token)| async move {
        let mut req = client.request(method.clone(), format!("{base}{path}"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if method == reqwest::Method::POST {
            req = req.json(&json!({}));
        }
        (format!("{method} {path}"), req.send().await.ok().map(|r| r.status()))
    }))
    .await
}

fn all_answered(answers: &[(String, Option<StatusCode>)]) {
    for (what, status) in answers {
        let status = status.unwrap_or_else(|| panic!("{what}: no answer while the lock was held"));
        assert!(
            status.is_success() || status.is_client_error() || status == StatusCode::SERVICE_UNAVAILABLE,
            "{what}: {status}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_are_answered_while_a_draw_holds_its_raffle() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let chain = TestChain::fast();
    let now = Utc::now();
    let draw_at = now + chrono::Duration::seconds(6);
    let held = sale_with(
        &app,
        2,
        draw_at,
        draw_at + chrono::Duration::hours(1),
        json!({"admission": "raffle", "draw_at": draw_at.to_rfc3339(), "beacon": chain.field(None)}),
    )
    .await;
    let other = sale_with(
        &app,
        2,
        now + chrono::Duration::hours(1),
        now + chrono::Duration::hours(2),
        json!({"admission": "raffle", "beacon": chain.field(None)}),
    )
    .await;
    for user in 1..=5 {
        assert_eq!(enter(&app.addr, &app.shopper(user), held).await.0, StatusCode::CREATED);
    }
    tokio::time::sleep((draw_at - Utc::now()).to_std().unwrap_or_default() + Duration::from_millis(200)).await;
    // The draw's lock: the raffle's row, as the close and the draw take it.
    let mut lock = app.pg().begin().await.unwrap();
    sqlx::query("SELECT 1 FROM raffles WHERE voucher_id = $1 FOR NO KEY UPDATE")
        .bind(held)
        .execute(&mut *lock)
        .await
        .unwrap();
    let state = || async {
        let s: (Option<chrono::DateTime<Utc>>, Option<chrono::DateTime<Utc>>) =
            sqlx::query_as("SELECT closed_at, drawn_at FROM raffles WHERE voucher_id = $1")
                .bind(held)
                .fetch_one(app.pg())
                .await
                .unwrap();
        s
    };
    // Closed in the background already, or not yet: either way, not drawn.
    let before = state().await;
    assert!(before.1.is_none());
    let (_, summary) = app.get(&format!("/api/v1/vouchers/{held}/raffle"), None).await;
    let round = summary["beacon"]["round"].as_i64().unwrap();
    let (status, body) = app
        .post(
            &format!("/api/v1/vouchers/{held}/raffle/beacon"),
            None,
            json!({"round": round, "signature": chain.sign(round)}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let get = reqwest::Method::GET;
    let post = reqwest::Method::POST;
    let got = answers(
        &impatient(),
        &app.addr,
        vec![
            (get.clone(), format!("/api/v1/vouchers/{held}/raffle"), None),
            (
                get.clone(),
                format!("/api/v1/vouchers/{held}/raffle/me"),
                Some(app.shopper(1)),
            ),
            (get.clone(), format!("/api/v1/vouchers/{held}/raffle/entries"), None),
            (
                post.clone(),
                format!("/api/v1/vouchers/{held}/raffle/entries"),
                Some(app.shopper(9)),
            ),
            (get.clone(), format!("/api/v1/vouchers/{other}/raffle"), None),
            (
                post.clone(),
                format!("/api/v1/vouchers/{other}/raffle/entries"),
                Some(app.shopper(1)),
            ),
            (
                get.clone(),
                format!("/api/v1/vouchers/{other}/raffle/me"),
                Some(app.shopper(1)),
            ),
        ],
    )
    .await;
    // Still held when they were answered: nothing closed or drawn under it.
    assert_eq!(state().await, before, "the raffle moved under the test's lock");
    lock.rollback().await.unwrap();
    all_answered(&got);
    // Let go: closed and drawn in the background.
    publish_round(&app.addr, held, &chain).await;
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_are_answered_while_a_seal_holds_its_queue() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let now = Utc::now();
    let begin = now + chrono::Duration::seconds(5);
    let queue = json!({"admission": "queue", "admit_rate": 1000});
    let held = sale_with(&app, 10, begin, begin + chrono::Duration::hours(1), queue.clone()).await;
    let other = sale_with(
        &app,
        10,
        now - chrono::Duration::seconds(1),
        now + chrono::Duration::hours(1),
        queue,
    )
    .await;
    for user in 1..=5 {
        assert_eq!(join(&app, held, user, &[]).await.0, StatusCode::CREATED);
    }
    // The seal's lock, taken before the start so that no seal begins first; held
    // past the start.
    let mut lock = app.pg().begin().await.unwrap();
    sqlx::query("SELECT 1 FROM admission_queues WHERE voucher_id = $1 FOR UPDATE")
        .bind(held)
        .execute(&mut *lock)
        .await
        .unwrap();
    assert!(Utc::now() < begin, "the early joins took past the start");
    tokio::time::sleep((begin - Utc::now()).to_std().unwrap_or_default() + Duration::from_millis(600)).await;
    let get = reqwest::Method::GET;
    let post = reqwest::Method::POST;
    let got = answers(
        &impatient(),
        &app.addr,
        vec![
            (
                post.clone(),
                format!("/api/v1/vouchers/{held}/queue"),
                Some(app.shopper(9)),
            ),
            (
                get.clone(),
                format!("/api/v1/vouchers/{held}/queue/me"),
                Some(app.shopper(1)),
            ),
            (
                post.clone(),
                format!("/api/v1/vouchers/{other}/queue"),
                Some(app.shopper(9)),
            ),
            (
                get.clone(),
                format!("/api/v1/vouchers/{other}/queue/me"),
                Some(app.shopper(9)),
            ),
        ],
    )
    .await;
    let sealed: bool = sqlx::query_scalar("SELECT sealed FROM admission_queues WHERE voucher_id = $1")
        .bind(held)
        .fetch_one(app.pg())
        .await
        .unwrap();
    assert!(!sealed, "sealed under the test's lock");
    lock.rollback().await.unwrap();
    all_answered(&got);
    // The late join while sealing: 503, to try again; the early arrival: waiting.
    assert_eq!(got[0].1, Some(StatusCode::SERVICE_UNAVAILABLE), "{got:?}");
    assert_eq!(got[1].1, Some(StatusCode::OK), "{got:?}");
    // Let go: sealed in the background, and the late shopper joins after the early ones.
    let early = eventually(Duration::from_secs(30), || async {
        let (_, me) = poll(&app, held, 1, None).await;
        me["place"].as_i64()
    })
    .await
    .expect("the early arrival got a place");
    assert!((1..=5).contains(&early));
    let (status, late) = join(&app, held, 9, &[]).await;
    assert_eq!(status, StatusCode::CREATED, "{late}");
    assert_eq!(late["place"], 6, "{late}");
    app.shutdown().await;
}
