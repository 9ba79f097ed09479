//! The public views under hostile or heavy browsing: an id that has no voucher is
//! remembered (asking again does not reach Postgres) without hiding a voucher
//! created later, the units on sale a crowd browses are read from Redis once
//! per refresh, and the shop list is paged with a cursor.
use crate::helpers::*;
use reqwest::StatusCode;
use seckill::app::Mode;
use serde_json::{json, Value};
use std::time::Duration;

/// Long enough that only the voucher event, never the expiry, can explain what
/// the tests see.
const TTL_MS: &str = "600000";

async fn get_within(app: &TestApp, path: &str, within: Duration) -> Result<(StatusCode, Value), reqwest::Error> {
    let resp = app
        .client
        .get(format!("{}{path}", app.addr))
        .timeout(within)
        .send()
        .await?;
    let status = resp.status();
    Ok((status, resp.json().await.unwrap_or(Value::Null)))
}

/// While the vouchers table is locked, a query for an id reaches Postgres and
/// waits; an id asked for before answers 404 from memory, on the voucher's
/// public view and on its admission routes alike.
#[tokio::test]
async fn a_missing_voucher_asked_again_does_not_reach_postgres() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns)
        .env("SECKILL_MISSING_VOUCHER_TTL_MS", TTL_MS)
        .spawn()
        .await;
    let (status, body) = app.get("/api/v1/vouchers/424242", None).await;
    assert_eq!((status, code(&body)), (StatusCode::NOT_FOUND, "voucher_not_found"));

    let mut lock = app.pg().begin().await.unwrap();
    sqlx::query("LOCK TABLE vouchers IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    // The control: an id not asked for before waits for Postgres, which waits for
    // the lock.
    let unasked = get_within(&app, "/api/v1/vouchers/525252", Duration::from_millis(500)).await;
    assert!(
        unasked.as_ref().is_err_and(|e| e.is_timeout()),
        "a query of Postgres is held by the lock: {unasked:?}"
    );
    for _ in 0..20 {
        let (status, body) = get_within(&app, "/api/v1/vouchers/424242", Duration::from_secs(5))
            .await
            .expect("answered from memory, not by the locked table");
        assert_eq!((status, code(&body)), (StatusCode::NOT_FOUND, "voucher_not_found"));
    }
    // The admission routes of that id too (before, each went to Postgres).
    for path in ["raffle", "raffle/me", "challenge", "queue/me"] {
        let resp = app
            .client
            .get(format!("{}/api/v1/vouchers/424242/{path}", app.addr))
            .bearer_auth(app.shopper(7))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{path}: answered from memory, not by the locked table: {e}"));
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        assert_eq!(
            (status, code(&body)),
            (StatusCode::NOT_FOUND, "voucher_not_found"),
            "{path}"
        );
    }
    lock.rollback().await.unwrap();
    app.shutdown().await;
}

/// Both instances remember that voucher 1 does not exist; once it is created it
/// shows at once on the instance that created it and, through its event, on the
/// other, long before the memory would expire.
#[tokio::test]
async fn a_voucher_created_after_it_was_missing_shows_at_once() {
    let ns = Namespace::new().await;
    let creator = TestApp::builder(&ns)
        .env("SECKILL_MISSING_VOUCHER_TTL_MS", TTL_MS)
        .spawn()
        .await;
    let other = TestApp::builder(&ns)
        .env("SECKILL_MISSING_VOUCHER_TTL_MS", TTL_MS)
        .mode(Mode::Serve)
        .relay(false)
        .spawn()
        .await;
    for app in [&creator, &other] {
        let (status, _) = app.get("/api/v1/vouchers/1", None).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    let v = creator.flash_sale(5).await;
    assert_eq!(v, 1, "the first voucher of a fresh database");
    let (status, body) = creator.get("/api/v1/vouchers/1", None).await;
    assert_eq!(status, StatusCode::OK, "at once where it was created: {body}");
    eventually(Duration::from_secs(10), || async {
        (other.get("/api/v1/vouchers/1", None).await.0 == StatusCode::OK).then_some(())
    })
    .await
    .expect("the other instance shows it once the voucher event arrives");
    creator.shutdown().await;
    other.shutdown().await;
}

/// The shop list comes in pages: `limit` at most, `next_after` the cursor of the
/// next page, null on the last; every voucher once, in id order.
#[tokio::test]
async fn the_shop_list_is_paged_with_a_cursor() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let mut made = Vec::new();
    for i in 0..5 {
        let body = json!({"shop_id": 9, "title": format!("v{i}"), "pay_value": 1, "actual_value": 2});
        let (status, v) = app.post("/api/v1/admin/vouchers", Some(&app.admin()), body).await;
        assert_eq!(status, StatusCode::CREATED, "{v}");
        made.push(v["id"].as_str().unwrap().to_owned());
    }
    // Another shop's voucher is never listed.
    let other = json!({"shop_id": 10, "title": "x", "pay_value": 1, "actual_value": 2});
    assert_eq!(
        app.post("/api/v1/admin/vouchers", Some(&app.admin()), other).await.0,
        StatusCode::CREATED
    );

    let (status, all) = app.get("/api/v1/vouchers?shop_id=9", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(all["items"].as_array().unwrap().len(), 5);
    assert!(all["next_after"].is_null(), "{all}");

    let mut seen = Vec::new();
    let mut query = "shop_id=9&limit=2".to_owned();
    let mut pages = 0;
    loop {
        let (status, page) = app.get(&format!("/api/v1/vouchers?{query}"), None).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        pages += 1;
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 2);
        seen.extend(items.iter().map(|v| v["id"].as_str().unwrap().to_owned()));
        match page["next_after"].as_str() {
            Some(after) => {
                assert_eq!(Some(after), items.last().and_then(|v| v["id"].as_str()));
                query = format!("shop_id=9&limit=2&after={after}");
            }
            None => break,
        }
        assert!(pages < 10, "the pages end");
    }
    assert_eq!(seen, made, "every voucher once, in id order");
    assert_eq!(pages, 3);
    app.shutdown().await;
}

/// `GET /api/v1/vouchers/{id}` of a sale of 8 shards shows its units on sale from
/// this instance's copy, read from Redis at most every `PUBLIC_REFRESH` (0.5 s):
/// while Redis does not answer (stopped), twenty browsers at once are all
/// answered with the units the copy holds (before, each request sent 3 commands a
/// shard). A try whose copy was renewed under the browsers (a slow machine) is
/// made again, three times at most; without the copy every try fails.
#[tokio::test]
async fn a_crowd_browsing_a_sale_costs_redis_one_read_per_refresh() {
    use crate::fixtures::{signal, OwnRedis};
    let ns = Namespace::new().await;
    let redis = OwnRedis::snapshots_only();
    let app = TestApp::builder(&ns).env("REDIS_URL", redis.url()).spawn().await;
    let v = app.sharded_sale(80, 8).await;
    assert_eq!(app.order(v, 1).await.0, StatusCode::ACCEPTED);
    let path = format!("/api/v1/vouchers/{v}");
    let refresh = seckill::sales::stock::PUBLIC_REFRESH;
    let mut tries = 0;
    loop {
        tries += 1;
        tokio::time::sleep(refresh).await;
        let (status, first) = get_within(&app, &path, Duration::from_secs(5)).await.unwrap();
        assert_eq!(status, StatusCode::OK, "{first}");
        assert_eq!(first["stock_remaining"], 79, "{first}");
        signal(redis.process(), "STOP");
        let answers = futures::future::join_all((0..20).map(|_| get_within(&app, &path, Duration::from_secs(2)))).await;
        signal(redis.process(), "CONT");
        let answered = answers
            .iter()
            .filter(|a| {
                a.as_ref()
                    .is_ok_and(|(s, b)| *s == StatusCode::OK && b["stock_remaining"] == 79)
            })
            .count();
        if answered == 20 {
            break;
        }
        assert!(
            tries < 3,
            "{answered} of 20 browsers answered from the copy while Redis was stopped"
        );
    }
    app.shutdown().await;
}
