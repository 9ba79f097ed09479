//! `a_proof_of_work_below_the_difficulty_is_refused`: joining a queue that asks
//! a proof of work needs the caller's solution of a challenge of at least the
//! sale's difficulty; a shopper has one place however often it asks.
//! `a_proof_of_work_is_checked_before_any_query`.
use super::*;
use seckill::admission::pow::{payload, solve, Challenge};
use seckill::admission::signing::Signer;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_proof_of_work_below_the_difficulty_is_refused() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let now = Utc::now();
    let (begin, end) = (now - chrono::Duration::seconds(1), now + chrono::Duration::hours(1));
    let difficulty = 3000;
    let v = sale_with(
        &app,
        10,
        begin,
        end,
        json!({"admission": "queue", "pow_difficulty": difficulty}),
    )
    .await;
    let challenge_path = format!("/api/v1/vouchers/{v}/challenge");

    // None.
    let (status, body) = join(&app, v, 1, &[]).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "proof_of_work_required"),
        "{body}"
    );
    // The service's challenge for shopper 1.
    let (status, c) = app.get(&challenge_path, Some(&app.shopper(1))).await;
    assert_eq!(status, StatusCode::OK, "{c}");
    let c: Challenge = serde_json::from_value(c).unwrap();
    assert_eq!(c.maxnumber, difficulty);
    let n = solve(&c).expect("the challenge has a solution");
    // A wrong number.
    let wrong = payload(&c, if n == 0 { 1 } else { n - 1 });
    let (status, body) = join(&app, v, 1, &[("X-Altcha", &wrong)]).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "proof_of_work_invalid"),
        "{body}"
    );
    // Below the difficulty: a challenge the service's own key signed, solved, but
    // of a smaller maxnumber than the sale asks.
    let easy = Signer::new(SECRET).challenge(v, 1, 10, Utc::now().timestamp() as u64);
    let easy_n = solve(&easy).unwrap();
    let (status, body) = join(&app, v, 1, &[("X-Altcha", &payload(&easy, easy_n))]).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "proof_of_work_invalid"),
        "{body}"
    );
    assert!(
        body["error"]["message"].as_str().unwrap().contains("difficulty"),
        "{body}"
    );
    // Shopper 1's solution does not let shopper 2 in.
    let good = payload(&c, n);
    let (status, body) = join(&app, v, 2, &[("X-Altcha", &good)]).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "proof_of_work_invalid"),
        "{body}"
    );
    // No place was made by any of these.
    let places: i64 = sqlx::query_scalar("SELECT count(*) FROM queue_places WHERE voucher_id = $1")
        .bind(v)
        .fetch_one(app.pg())
        .await
        .unwrap();
    assert_eq!(places, 0);
    // The solution: a place.
    let (status, first) = join(&app, v, 1, &[("X-Altcha", &good)]).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(first["place"], 1, "{first}");
    // Asking again, with or without the solution, or with a solution that has
    // expired since (or is below the difficulty): the same place, no new one.
    let expired = Signer::new(SECRET).challenge(v, 1, difficulty, Utc::now().timestamp() as u64 - 3600);
    let expired = payload(&expired, solve(&expired).unwrap());
    let too_easy = payload(&easy, easy_n);
    for headers in [
        vec![("X-Altcha", good.as_str())],
        vec![],
        vec![("X-Altcha", expired.as_str())],
        vec![("X-Altcha", too_easy.as_str())],
    ] {
        let (status, again) = join(&app, v, 1, &headers).await;
        assert_eq!(status, StatusCode::OK, "{again}");
        assert_eq!(again["place"], 1, "{again}");
    }
    // A first-come sale asks none.
    let plain = app.flash_sale(5).await;
    let (status, body) = app
        .get(&format!("/api/v1/vouchers/{plain}/challenge"), Some(&app.shopper(1)))
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "no_proof_of_work"),
        "{body}"
    );
    app.shutdown().await;
}

/// A proof of work sent is checked before anything is read: while the queue's
/// places and the raffle's entries are locked (a query of them would wait), a
/// wrong proof is refused at once, on joining the queue and on entering the
/// raffle (before, each looked the shopper up in Postgres first).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_proof_of_work_is_checked_before_any_query() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let now = Utc::now();
    let (begin, end) = (now - chrono::Duration::seconds(1), now + chrono::Duration::hours(2));
    let pow = |admission: &str| {
        let mut extra = json!({"admission": admission, "pow_difficulty": 1000});
        if admission == "raffle" {
            extra["draw_at"] = json!((now + chrono::Duration::hours(1)).to_rfc3339());
        }
        extra
    };
    let queue = sale_with(&app, 10, begin, end, pow("queue")).await;
    let raffle = sale_with(&app, 10, begin, end, pow("raffle")).await;
    let mut lock = app.pg().begin().await.unwrap();
    sqlx::query("LOCK TABLE queue_places, raffle_entries IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(3))
        .build()
        .unwrap();
    for path in [format!("{queue}/queue"), format!("{raffle}/raffle/entries")] {
        let resp = client
            .post(format!("{}/api/v1/vouchers/{path}", app.addr))
            .bearer_auth(app.shopper(1))
            .header("X-Altcha", "bm90IGEgcHJvb2Y=")
            .send()
            .await
            .unwrap_or_else(|e| panic!("{path}: answered without waiting for the locked table: {e}"));
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        assert_eq!(
            (status, code(&body)),
            (StatusCode::FORBIDDEN, "proof_of_work_invalid"),
            "{path}: {body}"
        );
    }
    lock.rollback().await.unwrap();
    app.shutdown().await;
}
