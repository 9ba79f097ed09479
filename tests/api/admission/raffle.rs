//! `a_raffle_is_recomputed_from_its_published_seed_and_entries`: the test draws
//! the winners itself, with its own SHA-256, from what the API publishes (the
//! seed, the entries and the beacon round it signed), and finds the service's;
//! winners order, everyone else is told they lost.
//! `a_crowd_reading_the_raffle_costs_postgres_one_query_per_refresh`.
use super::*;
use futures::stream::{self, StreamExt};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::time::Duration;

fn sha(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).unwrap();
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

/// Shopper `user`'s entry in sale `v`, as the service names it under the key it
/// derives from the JWT secret (the test's `SECRET`).
pub fn entry(v: i64, user: i64) -> String {
    let key = hmac(SECRET.as_bytes(), b"seckill raffle entry v1");
    hex::encode(hmac(&key, format!("{v}:{user}").as_bytes()))
}

pub async fn raffle_me(base: &str, shopper: &str, v: i64) -> (StatusCode, Value) {
    call(
        base,
        reqwest::Method::GET,
        &format!("/api/v1/vouchers/{v}/raffle/me"),
        shopper,
        &[],
        None,
    )
    .await
}

pub async fn enter(base: &str, shopper: &str, v: i64) -> (StatusCode, Value) {
    call(
        base,
        reqwest::Method::POST,
        &format!("/api/v1/vouchers/{v}/raffle/entries"),
        shopper,
        &[],
        None,
    )
    .await
}

/// Every published entry, page by page (`limit` 7 to cross pages).
pub async fn published_entries(base: &str, v: i64) -> Vec<(String, Option<bool>)> {
    let mut all = Vec::new();
    let mut after = String::new();
    loop {
        let q = if after.is_empty() {
            String::new()
        } else {
            format!("&after={after}")
        };
        let resp = reqwest::get(format!("{base}/api/v1/vouchers/{v}/raffle/entries?limit=7{q}"))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let page: Value = resp.json().await.unwrap();
        for e in page["items"].as_array().unwrap() {
            all.push((e["entry"].as_str().unwrap().to_owned(), e["won"].as_bool()));
        }
        match page["next_after"].as_str() {
            Some(next) => after = next.to_owned(),
            None => return all,
        }
    }
}

/// SHA-256 of the entries in ascending order, each followed by a line feed.
pub fn list_hash(entries: &[String]) -> String {
    let mut sorted = entries.to_vec();
    sorted.sort();
    sha(sorted.iter().map(|e| format!("{e}\n")).collect::<String>().as_bytes())
}

/// The winners by the published rule, computed here: the list's hash, then each
/// entry's score under the beacon's randomness (sha256 of its signature), the
/// seed and the list.
pub fn recompute(signature_hex: &str, seed_hex: &str, entries: &[String], stock: usize) -> Vec<String> {
    let list = list_hash(entries);
    let randomness = sha(&hex::decode(signature_hex).unwrap());
    let mut scored: Vec<(String, String)> = entries
        .iter()
        .map(|e| (sha(format!("{randomness}:{seed_hex}:{list}:{e}").as_bytes()), e.clone()))
        .collect();
    scored.sort();
    let mut won: Vec<String> = scored.into_iter().take(stock).map(|(_, e)| e).collect();
    won.sort();
    won
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_raffle_is_recomputed_from_its_published_seed_and_entries() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let (stock, shoppers) = (7_usize, 60_i64);
    let draw_at = Utc::now() + chrono::Duration::seconds(15);
    let chain = TestChain::fast();
    let v = sale_with(
        &app,
        stock as i64,
        draw_at,
        draw_at + chrono::Duration::hours(1),
        json!({"admission": "raffle", "draw_at": draw_at.to_rfc3339(), "beacon": chain.field(None)}),
    )
    .await;
    let before = reqwest::get(format!("{}/api/v1/vouchers/{v}/raffle", app.addr))
        .await
        .unwrap();
    let before: Value = before.json().await.unwrap();
    let commitment = before["commitment"].as_str().unwrap().to_owned();
    assert!(before["seed"].is_null(), "the seed is secret before the draw: {before}");
    stream::iter(1..=shoppers)
        .for_each_concurrent(16, |user| {
            let app = &app;
            async move {
                let (status, body) = enter(&app.addr, &app.shopper(user), v).await;
                assert_eq!(status, StatusCode::CREATED, "{body}");
                assert_eq!(body["entry"], entry(v, user), "{body}");
            }
        })
        .await;
    // Again: the same entry.
    let (status, again) = enter(&app.addr, &app.shopper(1), v).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert!(Utc::now() < draw_at, "entries took past draw_at");
    // Not drawn yet: no winner, no token; ordering needs one.
    let (_, me) = raffle_me(&app.addr, &app.shopper(1), v).await;
    assert_eq!(
        (me["drawn"].as_bool(), me["admission_token"].is_null()),
        (Some(false), true),
        "{me}"
    );
    tokio::time::sleep((draw_at - Utc::now()).to_std().unwrap_or_default() + Duration::from_millis(300)).await;
    // Closed to newcomers.
    let (status, body) = enter(&app.addr, &app.shopper(shoppers + 1), v).await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "raffle_closed"), "{body}");

    let after = publish_round(&app.addr, v, &chain).await;
    assert_eq!(after["commitment"], commitment.as_str());
    let signature = after["signature"].as_str().expect("the beacon's signature, published");
    let seed = after["seed"].as_str().expect("the seed, revealed");
    assert_eq!(
        sha(&hex::decode(seed).unwrap()),
        commitment,
        "the seed is the one committed to"
    );
    let entries = published_entries(&app.addr, v).await;
    assert_eq!(entries.len(), shoppers as usize);
    let listed: Vec<String> = entries.iter().map(|(e, _)| e.clone()).collect();
    let mut published_winners: Vec<String> = entries
        .iter()
        .filter(|(_, w)| *w == Some(true))
        .map(|(e, _)| e.clone())
        .collect();
    published_winners.sort();
    let mine = recompute(signature, seed, &listed, stock);
    assert_eq!(mine.len(), stock);
    assert_eq!(
        published_winners, mine,
        "the published winners are the ones the rule gives"
    );
    assert_eq!(after["winners"], stock);
    assert_eq!(after["entries"], shoppers);
    assert_eq!(
        after["list_hash"],
        list_hash(&listed).as_str(),
        "the list the draw closed is the published one"
    );

    // Each shopper is told; winners order with their token, losers cannot.
    let mut orders = 0;
    for user in 1..=shoppers {
        let (status, me) = raffle_me(&app.addr, &app.shopper(user), v).await;
        assert_eq!(status, StatusCode::OK, "{me}");
        let won = mine.contains(&entry(v, user));
        assert_eq!(me["won"].as_bool(), Some(won), "{me}");
        let token = me["admission_token"].as_str();
        assert_eq!(token.is_some(), won, "{me}");
        let (status, body) = order_with(&app, v, user, token).await;
        if won {
            assert_eq!(status, StatusCode::ACCEPTED, "{body}");
            orders += 1;
        } else {
            assert_eq!(
                (status, code(&body)),
                (StatusCode::FORBIDDEN, "admission_required"),
                "{body}"
            );
        }
    }
    assert_eq!(orders, stock);
    wait_stored(&app, v, stock as i64, Duration::from_secs(30), "the winners' orders").await;
    assert_balanced(&app, v).await;
    app.shutdown().await;
}

/// `GET .../raffle` answers from this instance's copy of the summary, made at
/// most every `SUMMARY_REFRESH` (0.5 s): while the raffle's entries are locked
/// (a count of them would wait), twenty readers at once are all answered (before,
/// each request counted every entry). A try whose copy was renewed under the
/// readers (a slow machine) is made again, three times at most; without the copy
/// every try fails.
#[tokio::test]
async fn a_crowd_reading_the_raffle_costs_postgres_one_query_per_refresh() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let now = Utc::now();
    let draw_at = now + chrono::Duration::hours(1);
    let v = sale_with(
        &app,
        10,
        now - chrono::Duration::seconds(1),
        now + chrono::Duration::hours(2),
        json!({"admission": "raffle", "draw_at": draw_at.to_rfc3339()}),
    )
    .await;
    let (status, body) = enter(&app.addr, &app.shopper(1), v).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let url = format!("{}/api/v1/vouchers/{v}/raffle", app.addr);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let refresh = seckill::admission::raffle::SUMMARY_REFRESH;
    let mut tries = 0;
    loop {
        tries += 1;
        // Past the last copy's refresh: this read makes a new one.
        tokio::time::sleep(refresh).await;
        let made = std::time::Instant::now();
        let first = client.get(&url).send().await.unwrap();
        assert_eq!(first.status(), StatusCode::OK);
        let mut lock = app.pg().begin().await.unwrap();
        sqlx::query("LOCK TABLE raffle_entries IN ACCESS EXCLUSIVE MODE")
            .execute(&mut *lock)
            .await
            .unwrap();
        // How old the copy was when the readers asked.
        let age = made.elapsed();
        let answers = futures::future::join_all((0..20).map(|_| client.get(&url).send())).await;
        lock.rollback().await.unwrap();
        let answered = answers
            .iter()
            .filter(|a| a.as_ref().is_ok_and(|r| r.status() == StatusCode::OK))
            .count();
        if answered == 20 {
            break;
        }
        // A copy renewed under the readers (a slow machine) waits for the lock:
        // the try is made again. Without the copy, every try fails.
        assert!(
            tries < 3,
            "{answered} of 20 readers answered, asking {age:?} after the copy, while the entries were locked"
        );
    }
    app.shutdown().await;
}
