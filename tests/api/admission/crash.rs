//! The API killed with -9 during a queue or a draw loses no place and no win:
//! - `kill_9_during_the_joins_and_during_the_seal_loses_no_place`;
//! - `kill_9_during_the_draw_loses_no_win`.
//!
//! The faults land inside the work, not beside it: the joins are killed while
//! requests are in flight (some answered, some refused by the dead process), and
//! the seal and the draw are held mid-transaction by a row lock the test takes,
//! until Postgres shows their statement waiting on it; only then is the process
//! killed.
use super::raffle::{enter, published_entries, raffle_me, recompute};
use super::*;
use crate::fixtures::spawn_binary;
use futures::stream::{self, StreamExt};
use seckill::http::auth::{JwtKeys, Role};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Only the processes under test touch the database: no in-process instance,
/// whose own queue ticker or draw could be the statement found waiting.
struct Outside {
    pg: sqlx::PgPool,
    jwt: JwtKeys,
}

impl Outside {
    async fn new(ns: &Namespace) -> Self {
        Self {
            pg: sqlx::PgPool::connect(&ns.vars["DATABASE_URL"]).await.unwrap(),
            jwt: JwtKeys::new(SECRET),
        }
    }
    fn shopper(&self, user: i64) -> String {
        self.jwt.mint(user, Role::Shopper, 600)
    }
    fn admin(&self) -> String {
        self.jwt.mint(1, Role::Admin, 600)
    }
    fn pg(&self) -> &sqlx::PgPool {
        &self.pg
    }
}

/// Waits until a statement starting with `prefix` waits on a lock in this database.
async fn wait_blocked(app: &Outside, prefix: &str) {
    let blocked = eventually(Duration::from_secs(20), || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
              WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1 || '%'",
        )
        .bind(prefix)
        .fetch_one(app.pg())
        .await
        .unwrap();
        (n > 0).then_some(())
    })
    .await;
    assert!(blocked.is_some(), "`{prefix}…` never waited on the test's lock");
}

async fn knows(base: &str, v: i64) {
    eventually(Duration::from_secs(10), || async {
        let resp = reqwest::get(format!("{base}/api/v1/vouchers/{v}")).await.ok()?;
        (resp.status() == StatusCode::OK).then_some(())
    })
    .await
    .expect("the binary knows the sale");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_during_the_joins_and_during_the_seal_loses_no_place() {
    let ns = Namespace::new().await;
    let (mut child, port) = spawn_binary(&ns, &[]).await;
    let base = format!("http://127.0.0.1:{port}");
    let app = Outside::new(&ns).await;
    let begin = Utc::now() + chrono::Duration::seconds(40);
    let v = create_sale(
        &base,
        &app.admin(),
        1000,
        begin,
        begin + chrono::Duration::hours(1),
        json!({"admission": "queue", "admit_rate": 10000}),
    )
    .await;
    knows(&base, v).await;
    let join_at = |base: &str, user: i64| {
        let (base, token) = (base.to_owned(), app.shopper(user));
        async move {
            let path = format!("/api/v1/vouchers/{v}/queue");
            let client = reqwest::Client::new();
            let resp = client
                .post(format!("{base}{path}"))
                .bearer_auth(token)
                .send()
                .await
                .ok()?;
            let status = resp.status();
            Some((status, resp.json::<Value>().await.unwrap_or(Value::Null)))
        }
    };
    // 400 early joins, 16 at a time; the process dies once 100 are answered.
    let (answered, acked, failed) = (AtomicUsize::new(0), Mutex::new(HashSet::new()), AtomicUsize::new(0));
    let child_pid = child.id();
    stream::iter(1..=400_i64)
        .for_each_concurrent(16, |user| {
            let (answered, acked, failed, join_at, base) = (&answered, &acked, &failed, &join_at, &base);
            async move {
                match join_at(base, user).await {
                    Some((StatusCode::CREATED, _)) => {
                        acked.lock().unwrap().insert(user);
                        if answered.fetch_add(1, Ordering::SeqCst) + 1 == 100 {
                            let _ = std::process::Command::new("kill")
                                .args(["-9", &child_pid.to_string()])
                                .status();
                        }
                    }
                    Some((status, body)) if status.is_server_error() => {
                        failed.fetch_add(1, Ordering::SeqCst);
                        let _ = body;
                    }
                    Some((status, body)) => panic!("join: {status} {body}"),
                    None => {
                        failed.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        })
        .await;
    let _ = child.wait();
    let acked = acked.into_inner().unwrap();
    println!(
        "queue kill -9: {} joins acknowledged, {} lost to the kill",
        acked.len(),
        failed.load(Ordering::SeqCst)
    );
    assert!(
        acked.len() >= 100 && failed.load(Ordering::SeqCst) > 0,
        "the kill landed among the joins"
    );
    assert!(Utc::now() < begin, "the joins took past begin_at");

    // Started again: every acknowledged shopper still has a place (joining again
    // answers 200, not 201).
    let (mut again, port) = spawn_binary(&ns, &[]).await;
    let base = format!("http://127.0.0.1:{port}");
    for user in acked.iter().copied() {
        let (status, body) = join_at(&base, user).await.expect("answered");
        assert_eq!(status, StatusCode::OK, "shopper {user} lost their place: {body}");
        assert_eq!(body["state"], "waiting_for_start", "{body}");
    }
    assert!(Utc::now() < begin, "the joins and re-joins took past begin_at");
    // The seal, held mid-way by a lock on one place (taken before the start: the
    // instance seals a running queue on its own), and the process killed.
    let mut hold = app.pg().begin().await.unwrap();
    let some = *acked.iter().next().unwrap();
    sqlx::query("SELECT 1 FROM queue_places WHERE voucher_id = $1 AND user_id = $2 FOR UPDATE")
        .bind(v)
        .bind(some)
        .execute(&mut *hold)
        .await
        .unwrap();
    tokio::time::sleep((begin - Utc::now()).to_std().unwrap_or_default() + Duration::from_millis(200)).await;
    wait_blocked(&app, "UPDATE queue_places").await;
    let _ = again.kill();
    let _ = again.wait();
    hold.rollback().await.unwrap();
    // Started again: the seal runs whole, and every acknowledged shopper has a
    // place of its own, the places 1..=n.
    let (mut third, port) = spawn_binary(&ns, &[]).await;
    let base = format!("http://127.0.0.1:{port}");
    let mut places = HashMap::new();
    for user in acked.iter().copied() {
        // The seal runs in the background: until it is done, no place yet.
        let place = eventually(Duration::from_secs(30), || async {
            let resp = reqwest::Client::new()
                .get(format!("{base}/api/v1/vouchers/{v}/queue/me"))
                .bearer_auth(app.shopper(user))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), StatusCode::OK);
            let body: Value = resp.json().await.unwrap();
            body["place"].as_i64()
        })
        .await
        .unwrap_or_else(|| panic!("shopper {user} has no place"));
        places.insert(user, place);
    }
    let all: Vec<i64> = sqlx::query_scalar("SELECT place FROM queue_places WHERE voucher_id = $1 ORDER BY place")
        .bind(v)
        .fetch_all(app.pg())
        .await
        .unwrap();
    assert_eq!(
        all,
        (1..=all.len() as i64).collect::<Vec<_>>(),
        "places 1..=n, each once"
    );
    assert!(places.values().collect::<HashSet<_>>().len() == acked.len());
    let _ = third.kill();
    let _ = third.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_during_the_draw_loses_no_win() {
    let ns = Namespace::new().await;
    let (mut child, port) = spawn_binary(&ns, &[]).await;
    let base = format!("http://127.0.0.1:{port}");
    let app = Outside::new(&ns).await;
    let (stock, shoppers) = (5_usize, 40_i64);
    let draw_at = Utc::now() + chrono::Duration::seconds(20);
    let chain = TestChain::fast();
    let v = create_sale(
        &base,
        &app.admin(),
        stock as i64,
        draw_at,
        draw_at + chrono::Duration::hours(1),
        json!({"admission": "raffle", "beacon": chain.field(None)}),
    )
    .await;
    knows(&base, v).await;
    for user in 1..=shoppers {
        let (status, body) = enter(&base, &app.shopper(user), v).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    tokio::time::sleep((draw_at - Utc::now()).to_std().unwrap_or_default() + Duration::from_millis(200)).await;
    let summary_of = |base: String| async move {
        let s: Value = reqwest::get(format!("{base}/api/v1/vouchers/{v}/raffle"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        s
    };
    let closed = eventually(Duration::from_secs(30), || async {
        let s = summary_of(base.clone()).await;
        (s["status"] == "awaiting_beacon").then_some(s)
    })
    .await
    .expect("the entries closed in the background");
    // The draw, held mid-way by a lock on every entry (it writes the winners'), and
    // the process killed.
    let mut hold = app.pg().begin().await.unwrap();
    sqlx::query("SELECT 1 FROM raffle_entries WHERE voucher_id = $1 FOR UPDATE")
        .bind(v)
        .execute(&mut *hold)
        .await
        .unwrap();
    let round = closed["beacon"]["round"].as_i64().unwrap();
    let (status, body) = call(
        &base,
        reqwest::Method::POST,
        &format!("/api/v1/vouchers/{v}/raffle/beacon"),
        "",
        &[],
        Some(json!({"round": round, "signature": chain.sign(round)})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    wait_blocked(&app, "UPDATE raffle_entries").await;
    let _ = child.kill();
    let _ = child.wait();
    hold.rollback().await.unwrap();
    let drawn: Option<bool> = sqlx::query_scalar("SELECT drawn_at IS NOT NULL FROM raffles WHERE voucher_id = $1")
        .bind(v)
        .fetch_one(app.pg())
        .await
        .unwrap();
    assert_eq!(drawn, Some(false), "the killed draw left no trace");

    // Started again: drawn whole in the background, by the rule; every winner
    // told, and ordering.
    let (mut again, port) = spawn_binary(&ns, &[]).await;
    let base = format!("http://127.0.0.1:{port}");
    let summary = eventually(Duration::from_secs(30), || async {
        let s = summary_of(base.clone()).await;
        (s["status"] == "drawn").then_some(s)
    })
    .await
    .expect("drawn after the restart");
    let seed = summary["seed"].as_str().expect("the seed, revealed").to_owned();
    let signature = summary["signature"].as_str().expect("the round's signature").to_owned();
    let entries: Vec<String> = published_entries(&base, v).await.into_iter().map(|(e, _)| e).collect();
    assert_eq!(entries.len(), shoppers as usize, "no entry lost");
    let winners = recompute(&signature, &seed, &entries, stock);
    let won_by = |base: String| {
        let app = &app;
        async move {
            let mut won = Vec::new();
            for user in 1..=shoppers {
                let (status, me) = raffle_me(&base, &app.shopper(user), v).await;
                assert_eq!(status, StatusCode::OK, "{me}");
                if me["won"] == true {
                    assert!(me["admission_token"].is_string(), "{me}");
                    won.push(me["entry"].as_str().unwrap().to_owned());
                }
            }
            won.sort();
            won
        }
    };
    assert_eq!(won_by(base.clone()).await, winners);
    // Killed again after the draw: the same winners.
    let _ = again.kill();
    let _ = again.wait();
    let (mut third, port) = spawn_binary(&ns, &[]).await;
    assert_eq!(won_by(format!("http://127.0.0.1:{port}")).await, winners);
    let _ = third.kill();
    let _ = third.wait();
}
