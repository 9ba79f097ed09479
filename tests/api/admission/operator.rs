//! `the_operator_who_knows_the_seed_and_the_secret_cannot_steer_the_raffle`: the
//! test plays a dishonest operator. It holds the raffle key (the JWT secret it
//! derives from) and reads the seed from the database, and adds sybil entries
//! until the close. What it can try is refused or changes nothing: a round
//! published before the close is refused at creation, another round or another
//! chain's signature at the draw, a top-up after the close; its own prediction
//! from the seed is not the draw; the winners follow the beacon's signature.
//! `seckill raffle verify` and the test's own code recompute the draw, and the
//! tool catches a winner the operator swaps in the database afterwards.
//! `a_close_held_past_its_round_draws_with_a_later_round`: entries whose close is
//! held up until the named round is about to be public are not drawn with it.
use super::raffle::{enter, entry, published_entries, recompute};
use super::*;
use std::time::Duration;

/// `seckill raffle verify V --url BASE`: (exit success, stdout + stderr).
async fn verify_tool(base: &str, v: i64) -> (bool, String) {
    let base = base.to_owned();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_seckill"))
            .args(["raffle", "verify", &v.to_string(), "--url", &base])
            .output()
            .expect("seckill raffle verify runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    })
    .await
    .unwrap()
}

async fn beacon(app: &TestApp, v: i64, round: i64, signature: &str) -> (StatusCode, Value) {
    app.post(
        &format!("/api/v1/vouchers/{v}/raffle/beacon"),
        None,
        json!({"round": round, "signature": signature}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_operator_who_knows_the_seed_and_the_secret_cannot_steer_the_raffle() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let chain = TestChain::fast();
    let draw_at = Utc::now() + chrono::Duration::seconds(12);
    let end = draw_at + chrono::Duration::hours(1);
    let stock = 3_usize;
    // A round published before the close: refused at creation.
    let early = (draw_at.timestamp() - chain.genesis_time) / chain.period + 1;
    assert!(chain.round_at(early) <= draw_at.timestamp());
    let mut body = json!({"shop_id": "7", "title": "fair", "pay_value": 100, "actual_value": 1000,
                          "stock": stock, "begin_at": draw_at.to_rfc3339(), "end_at": end.to_rfc3339(),
                          "admission": "raffle", "beacon": chain.field(Some(early))});
    let (status, refused) = app
        .post("/api/v1/admin/vouchers", Some(&app.admin()), body.clone())
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("beacon.round: must be published at least 10 s after draw_at"),
        "{refused}"
    );
    body["beacon"] = chain.field(None);
    let (status, created) = app.post("/api/v1/admin/vouchers", Some(&app.admin()), body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let v: i64 = created["id"].as_str().unwrap().parse().unwrap();

    // Honest shoppers, then the operator's sybils up to the close. The operator
    // knows every entry's name (the key) and the seed (the database).
    for user in 1..=30 {
        assert_eq!(enter(&app.addr, &app.shopper(user), v).await.0, StatusCode::CREATED);
    }
    let seed: Vec<u8> = sqlx::query_scalar("SELECT seed FROM raffles WHERE voucher_id = $1")
        .bind(v)
        .fetch_one(app.pg())
        .await
        .unwrap();
    let seed = hex::encode(seed);
    let mut sybil = 1_000_i64;
    while Utc::now() + chrono::Duration::seconds(2) < draw_at && sybil < 1_020 {
        assert_eq!(enter(&app.addr, &app.shopper(sybil), v).await.0, StatusCode::CREATED);
        sybil += 1;
    }
    let ours: Vec<String> = (1_000..sybil).map(|u| entry(v, u)).collect();
    // The operator's beacon before the close is refused: the draw cannot be rushed.
    let (status, early_beacon) = beacon(&app, v, 1, &chain.sign(1)).await;
    assert_eq!(
        (status, code(&early_beacon)),
        (StatusCode::CONFLICT, "raffle_open"),
        "{early_beacon}"
    );
    tokio::time::sleep((draw_at - Utc::now()).to_std().unwrap_or_default() + Duration::from_millis(300)).await;
    let closed = eventually(Duration::from_secs(30), || async {
        let (_, s) = app.get(&format!("/api/v1/vouchers/{v}/raffle"), None).await;
        (s["status"] == "awaiting_beacon").then_some(s)
    })
    .await
    .expect("the entries closed");
    assert_eq!(closed["winners"], stock, "{closed}");
    let round = closed["beacon"]["round"].as_i64().unwrap();
    assert!(chain.round_at(round) > draw_at.timestamp(), "{closed}");
    // A top-up after the close would change how many win: refused.
    let (status, top_up) = app
        .post(
            &format!("/api/v1/admin/vouchers/{v}/stock"),
            Some(&app.admin()),
            json!({"add": 5}),
        )
        .await;
    assert_eq!(
        (status, code(&top_up)),
        (StatusCode::CONFLICT, "raffle_closed"),
        "{top_up}"
    );
    // Another round, or the right round signed by another key: refused.
    let (status, other_round) = beacon(&app, v, round + 1, &chain.sign(round + 1)).await;
    assert_eq!(
        (status, code(&other_round)),
        (StatusCode::CONFLICT, "beacon_round_mismatch"),
        "{other_round}"
    );
    let forger = TestChain::new(chain.genesis_time, chain.period);
    let (status, forged) = beacon(&app, v, round, &forger.sign(round)).await;
    assert_eq!(
        (status, code(&forged)),
        (StatusCode::UNPROCESSABLE_ENTITY, "beacon_invalid"),
        "{forged}"
    );
    let (_, still) = app
        .get(&format!("/api/v1/vouchers/{v}/raffle/entries?won=true"), None)
        .await;
    assert_eq!(
        still["items"].as_array().map(Vec::len),
        Some(0),
        "nothing drawn: {still}"
    );

    let drawn = publish_round(&app.addr, v, &chain).await;
    let signature = drawn["signature"].as_str().unwrap();
    let listed: Vec<String> = published_entries(&app.addr, v)
        .await
        .into_iter()
        .map(|(e, _)| e)
        .collect();
    assert_eq!(listed.len(), 30 + ours.len());
    let mut published: Vec<String> = published_entries(&app.addr, v)
        .await
        .into_iter()
        .filter(|(_, w)| *w == Some(true))
        .map(|(e, _)| e)
        .collect();
    published.sort();
    // The test's own recomputation, from public data and the beacon.
    assert_eq!(published, recompute(signature, &seed, &listed, stock));
    // The winners follow the beacon: another chain's signature of the round draws
    // others; what the operator could compute before (seed and list alone) is not
    // the draw.
    assert_ne!(published, recompute(&forger.sign(round), &seed, &listed, stock));
    let list = super::raffle::list_hash(&listed);
    let mut by_seed: Vec<(String, String)> = listed
        .iter()
        .map(|e| {
            (
                seckill::admission::signing::sha256_hex(format!("{seed}:{list}:{e}").as_bytes()),
                e.clone(),
            )
        })
        .collect();
    by_seed.sort();
    let mut predicted: Vec<String> = by_seed.into_iter().take(stock).map(|(_, e)| e).collect();
    predicted.sort();
    assert_ne!(published, predicted, "the seed alone told who wins");
    assert_eq!(drawn["winners"], stock);

    // The tool agrees; then the operator swaps a winner in the database, and the
    // tool says so.
    let (ok, said) = verify_tool(&app.addr, v).await;
    assert!(ok, "{said}");
    assert!(said.contains("the draw matches the rule"), "{said}");
    assert!(
        said.contains("not quicknet"),
        "a chain of the test's own is named as such: {said}"
    );
    let loser = listed.iter().find(|e| !published.contains(e)).unwrap();
    sqlx::query("UPDATE raffle_entries SET won = (entry = $2) WHERE voucher_id = $1 AND (won OR entry = $2)")
        .bind(v)
        .bind(loser)
        .execute(app.pg())
        .await
        .unwrap();
    let (ok, said) = verify_tool(&app.addr, v).await;
    assert!(!ok, "a swapped winner went unseen: {said}");
    assert!(said.contains("not the rule's"), "{said}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_close_held_past_its_round_draws_with_a_later_round() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let chain = TestChain::fast();
    let draw_at = Utc::now() + chrono::Duration::seconds(4);
    let v = sale_with(
        &app,
        2,
        draw_at,
        draw_at + chrono::Duration::hours(1),
        json!({"admission": "raffle", "draw_at": draw_at.to_rfc3339(), "beacon": chain.field(None)}),
    )
    .await;
    for user in 1..=8 {
        assert_eq!(enter(&app.addr, &app.shopper(user), v).await.0, StatusCode::CREATED);
    }
    let (_, s) = app.get(&format!("/api/v1/vouchers/{v}/raffle"), None).await;
    let named = s["beacon"]["round"].as_i64().unwrap();
    assert!(chain.round_at(named) >= draw_at.timestamp() + 10, "{s}");
    // An entry stalled inside its transaction (as one that checked the clock just
    // before draw_at would be) holds the close off until the round is a second
    // from being published.
    let mut stalled = app.pg().begin().await.unwrap();
    sqlx::query("SELECT 1 FROM raffles WHERE voucher_id = $1 FOR SHARE")
        .bind(v)
        .execute(&mut *stalled)
        .await
        .unwrap();
    let until = chrono::DateTime::from_timestamp(chain.round_at(named) - 1, 0).unwrap();
    tokio::time::sleep((until - Utc::now()).to_std().unwrap_or_default()).await;
    let (_, s) = app.get(&format!("/api/v1/vouchers/{v}/raffle"), None).await;
    assert_eq!(s["status"], "closing", "{s}");
    // The round named is published meanwhile; anyone could read it now.
    let (status, early) = beacon(&app, v, named, &chain.sign(named)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{early}");
    stalled.rollback().await.unwrap();
    let closed = eventually(Duration::from_secs(30), || async {
        let (_, s) = app.get(&format!("/api/v1/vouchers/{v}/raffle"), None).await;
        (s["status"] == "awaiting_beacon").then_some(s)
    })
    .await
    .expect("closed once let go, waiting for a later round");
    assert_eq!(closed["beacon_named_round"], named, "{closed}");
    let round = closed["beacon"]["round"].as_i64().unwrap();
    let closed_at: chrono::DateTime<Utc> = closed["closed_at"].as_str().unwrap().parse().unwrap();
    assert!(chain.round_at(round) >= closed_at.timestamp() + 10, "{closed}");
    let (status, refused) = beacon(&app, v, named, &chain.sign(named)).await;
    assert_eq!(
        (status, code(&refused)),
        (StatusCode::CONFLICT, "beacon_round_mismatch"),
        "{refused}"
    );
    let drawn = publish_round(&app.addr, v, &chain).await;
    assert_eq!(drawn["beacon"]["round"], round);
    let (ok, said) = verify_tool(&app.addr, v).await;
    assert!(ok, "{said}");
    assert!(said.contains(&format!("named round {named}")), "{said}");
    app.shutdown().await;
}
