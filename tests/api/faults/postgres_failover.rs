//! The Postgres primary killed with -9 mid-sale and its
//! synchronous standby promoted. The processes were given the standby
//! (`SECKILL_DATABASE_STANDBY_URLS`) and point their pools at it once it is primary.
use super::*;
use crate::fixtures::{spawn_serve_binary, spawn_worker_binary, Reaped};

/// Two `serve` processes (the test's in-process instance, whose worker also
/// runs, and one more) and two `seckill worker` processes, a sharded sale, a
/// crowd: the primary dies with -9 (postmaster and backends) while orders are on
/// their way to it, and the standby is promoted. Every acknowledged order is
/// stored once, no id twice, the stock sold exactly, no incident (a counter the
/// standby lacked would be `postgres_went_back`), no 500, and the sale is never
/// closed: the hot path needs no Postgres.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "runs PostgreSQL clusters as the postgres user: needs root (scripts/test.sh runs it as root)"]
async fn the_postgres_primary_killed_9_and_its_sync_standby_promoted_loses_nothing() {
    require_root();
    let ns = Namespace::new().await;
    let (primary, standby) = tokio::task::spawn_blocking(OwnPostgres::with_sync_standby)
        .await
        .unwrap();
    let (primary_url, standby_url) = (primary.url(), standby.url());
    let app = TestApp::builder(&ns)
        .env("DATABASE_URL", primary_url.clone())
        .env("SECKILL_DATABASE_STANDBY_URLS", standby_url.clone())
        .spawn()
        .await;
    let extra = [
        ("DATABASE_URL", primary_url.as_str()),
        ("SECKILL_DATABASE_STANDBY_URLS", standby_url.as_str()),
    ];
    let (serve, _) = spawn_serve_binary(&ns, &extra).await;
    let _children = Reaped(vec![
        serve,
        spawn_worker_binary(&ns, &extra).await,
        spawn_worker_binary(&ns, &extra).await,
    ]);
    let stock = 250;
    let v = app.sharded_sale(stock, 4).await;
    let (primary, standby) = (Arc::new(primary), Arc::new(standby));
    let promoted_in = Arc::new(std::sync::Mutex::new(Duration::ZERO));
    let tally = crowd(&app.addr, &app.jwt, app.pg(), v, 1..301, |landing| {
        let (primary, standby, promoted_in) = (primary.clone(), standby.clone(), promoted_in.clone());
        async move {
            landing.lands().await;
            let killed = std::time::Instant::now();
            primary.kill9();
            tokio::task::spawn_blocking(move || standby.promote()).await.unwrap();
            *promoted_in.lock().unwrap() = killed.elapsed();
            let after = landing.now().await;
            println!("fault postgres primary killed, standby promoted; then {after:?}");
        }
    })
    .await;
    let all = after_the_fault("postgres failover", &app.addr, &app.jwt, app.pg(), v, tally).await;
    settle("postgres failover", &app, v, stock, &all).await;
    println!(
        "fault postgres failover: promoted {:.1} s after the kill",
        promoted_in.lock().unwrap().as_secs_f64()
    );
    never_closed("postgres failover", &app, v, &all).await;
    assert_eq!(standby.query("SELECT pg_is_in_recovery()").trim(), "f");
    // A process started after the promotion, given the dead primary first,
    // chooses the promoted standby before it migrates, and serves from it.
    let (late, port) = spawn_serve_binary(&ns, &extra).await;
    let _late = Reaped(vec![late]);
    let resp = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/api/v1/admin/vouchers/{v}"))
        .bearer_auth(app.admin())
        .send()
        .await
        .expect("the late serve answers");
    assert_eq!(resp.status(), StatusCode::OK);
    let voucher: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(voucher["stats"]["stock_remaining"], 0, "{voucher}");
    app.shutdown().await;
}
