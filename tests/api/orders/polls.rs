//! Owners polling and waiting for their orders: answers kept by the status board
//! until Postgres announces a change (`src/ordering/status/board.rs`), long polls
//! (`?wait=`), `Retry-After` on pending answers.
use super::*;
use seckill::app::Mode;
use seckill::ordering::status::board::Key;
use serde_json::json;

/// A GET of `path` with `token`: status, `Retry-After`, body.
async fn get(app: &TestApp, path: &str, token: &str) -> (StatusCode, Option<String>, Value) {
    let resp = reqwest::Client::new()
        .get(format!("{}{path}", app.addr))
        .bearer_auth(token)
        .send()
        .await
        .expect("the lookup answered");
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (resp.status(), retry, resp.json().await.unwrap_or(Value::Null))
}

async fn board_live(app: &TestApp) {
    let board = app.app().state().ordering.lookup.board.clone();
    eventually(Duration::from_secs(10), || async { board.is_live().then_some(()) })
        .await
        .expect("the status board hears Postgres within 10 s");
}

async fn waiting(app: &TestApp, n: usize) {
    let board = app.app().state().ordering.lookup.board.clone();
    eventually(Duration::from_secs(10), || async {
        (board.waiting() == n).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("{n} long polls held within 10 s"));
}

fn accepted_id(status: StatusCode, body: &Value) -> String {
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body["order_id"].as_str().unwrap().to_owned()
}

/// A pending answer tells when to ask again; a long poll of it answers `created`
/// within 2 s of the order's row being stored (by a worker started while it waits).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_poll_answers_within_two_seconds_of_its_order_being_stored() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns).worker(false).spawn().await;
    let v = app.flash_sale(5).await;
    let (status, body) = app.order(v, 1).await;
    let id = accepted_id(status, &body);
    let path = format!("/api/v1/orders/{id}");
    let token = app.shopper(1);
    let (status, retry, body) = get(&app, &path, &token).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("pending")),
        "{body}"
    );
    assert_eq!(retry.as_deref(), Some("1"), "a pending answer carries Retry-After");
    let held = {
        let (app_addr, path, token) = (app.addr.clone(), format!("{path}?wait=30"), token.clone());
        tokio::spawn(async move {
            let resp = reqwest::Client::new()
                .get(format!("{app_addr}{path}"))
                .bearer_auth(token)
                .send()
                .await
                .expect("the long poll answered");
            let status = resp.status();
            let body: Value = resp.json().await.unwrap();
            (status, body, Instant::now())
        })
    };
    waiting(&app, 1).await;
    let worker = TestApp::builder(&ns).mode(Mode::Worker).spawn().await;
    let stored = eventually(Duration::from_secs(30), || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM voucher_orders WHERE id = $1")
            .bind(id.parse::<i64>().unwrap())
            .fetch_one(app.pg())
            .await
            .ok()?;
        (n == 1).then(Instant::now)
    })
    .await
    .expect("stored within 30 s");
    let (status, body, answered) = held.await.unwrap();
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("created")),
        "{body}"
    );
    let after = answered.saturating_duration_since(stored);
    println!("long poll: answered {after:?} after the row was seen stored");
    assert!(after <= Duration::from_secs(2), "answered {after:?} after the store");
    worker.shutdown().await;
    app.shutdown().await;
}

/// A stored order polled on instance B is kept there (no query for the next
/// poll); paid through instance A, B's polls read `paid` within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pay_on_one_instance_is_seen_by_a_poll_on_another_within_a_second() {
    let ns = Namespace::new().await;
    let a = TestApp::spawn(&ns).await;
    let b = TestApp::builder(&ns).api_only().spawn().await;
    board_live(&b).await;
    let v = a.flash_sale(5).await;
    let (status, body) = a.order(v, 1).await;
    let id = accepted_id(status, &body);
    let path = format!("/api/v1/orders/{id}");
    let token = a.shopper(1);
    eventually(Duration::from_secs(15), || async {
        let (_, _, o) = get(&b, &path, &token).await;
        (o["status"] == "created").then_some(())
    })
    .await
    .expect("stored within 15 s");
    let (_, _, o) = get(&b, &path, &token).await;
    assert_eq!(o["status"], "created");
    let key = Key::Id {
        order: id.parse().unwrap(),
        owner: 1,
    };
    let board = b.app().state().ordering.lookup.board.clone();
    assert!(board.get(&key).is_some(), "B keeps the stored order's answer");
    let (status, paid) = a.post(&format!("{path}/pay"), Some(&token), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{paid}");
    let paid_at = Instant::now();
    let (seen, answer) = loop {
        let sent = Instant::now();
        let (status, _, o) = get(&b, &path, &token).await;
        assert_eq!(status, StatusCode::OK, "{o}");
        if o["status"] == "paid" {
            break (sent, o);
        }
        assert!(
            paid_at.elapsed() < Duration::from_secs(10),
            "B still answers {o} 10 s after the pay"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let late = seen.saturating_duration_since(paid_at);
    println!("pay seen on the other instance: by a poll sent {late:?} after the pay's answer");
    assert!(
        late <= Duration::from_secs(1),
        "B answered `created` {late:?} after the pay"
    );
    // What B answers from the announcement is what a read of Postgres gives (an
    // admin's lookup is never kept).
    let (_, read) = a.get(&path, Some(&a.admin())).await;
    assert_eq!(answer, read);
    b.shutdown().await;
    a.shutdown().await;
}

/// Past `SECKILL_MAX_HELD_WAITS` a long poll is answered 503 at once (with
/// `Retry-After`); a plain poll still answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn long_polls_past_their_bound_answer_503_at_once() {
    let ns = Namespace::new().await;
    let app = Arc::new(
        TestApp::builder(&ns)
            .worker(false)
            .env("SECKILL_MAX_HELD_WAITS", "2")
            .spawn()
            .await,
    );
    let v = app.flash_sale(5).await;
    let mut ids = Vec::new();
    for u in 1..=3 {
        let (status, body) = app.order(v, u).await;
        ids.push(accepted_id(status, &body));
    }
    let held: Vec<_> = (0..2)
        .map(|k| {
            let (app, id) = (app.clone(), ids[k].clone());
            tokio::spawn(async move {
                get(
                    &app,
                    &format!("/api/v1/orders/{id}?wait=20"),
                    &app.shopper(k as i64 + 1),
                )
                .await
            })
        })
        .collect();
    waiting(&app, 2).await;
    let started = Instant::now();
    let (status, retry, body) = get(&app, &format!("/api/v1/orders/{}?wait=20", ids[2]), &app.shopper(3)).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        "{body}"
    );
    assert!(retry.is_some(), "503 with Retry-After");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered at once, not held"
    );
    let (status, _, body) = get(&app, &format!("/api/v1/orders/{}", ids[2]), &app.shopper(3)).await;
    assert_eq!((status, body["status"].as_str()), (StatusCode::OK, Some("pending")));
    // Out of range.
    let (status, _, body) = get(&app, &format!("/api/v1/orders/{}?wait=31", ids[2]), &app.shopper(3)).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "validation_failed"),
        "{body}"
    );
    for h in held {
        h.abort();
    }
}

/// A graceful stop (SIGTERM) answers every held long poll at once, with the
/// status as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_graceful_stop_answers_held_long_polls_at_once() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns).worker(false).spawn().await;
    let v = app.flash_sale(5).await;
    let (status, body) = app.order(v, 1).await;
    let id = accepted_id(status, &body);
    let held = {
        let (addr, token) = (app.addr.clone(), app.shopper(1));
        tokio::spawn(async move {
            let resp = reqwest::Client::new()
                .get(format!("{addr}/api/v1/orders/{id}?wait=30"))
                .bearer_auth(token)
                .send()
                .await
                .expect("the long poll answered");
            (resp.status(), resp.json::<Value>().await.unwrap())
        })
    };
    waiting(&app, 1).await;
    let started = Instant::now();
    app.shutdown().await;
    let (status, body) = tokio::time::timeout(Duration::from_secs(10), held)
        .await
        .expect("answered at the stop, not at its 30 s")
        .unwrap();
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("pending")),
        "{body}"
    );
    println!("held long poll answered {:?} after the stop began", started.elapsed());
}

/// A pending answer the board keeps is not served while the order's sale is
/// closed here (a shard lost or behind, its repair under way): 503 with
/// `Retry-After`, never 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_kept_pending_answer_of_a_sale_closed_here_answers_503() {
    let ns = Namespace::new().await;
    let redis = OwnRedis::snapshots_only();
    let app = TestApp::builder(&ns)
        .env("REDIS_URL", redis.url())
        .worker(false)
        .spawn()
        .await;
    board_live(&app).await;
    let v = app.flash_sale(5).await;
    let (status, body) = app.order(v, 1).await;
    let id = accepted_id(status, &body);
    let path = format!("/api/v1/orders/{id}");
    let (_, _, o) = get(&app, &path, &app.shopper(1)).await;
    assert_eq!(o["status"], "pending");
    let state = app.app().state().clone();
    let key = Key::Id {
        order: id.parse().unwrap(),
        owner: 1,
    };
    assert!(
        state.ordering.lookup.board.get(&key).is_some(),
        "the pending answer is kept"
    );
    // Redis takes no write for a while: the sale's check or repair cannot reopen it.
    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "3000", "WRITE"]).as_deref(), Some("OK"));
    state.recovery.lost(v, "the test closes it");
    let (status, retry, body) = get(&app, &path, &app.shopper(1)).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        "{body}"
    );
    assert!(retry.is_some());
    app.shutdown().await;
}
