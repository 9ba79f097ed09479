//! A `serve` process cut off from Postgres while Redis goes back in time in the same
//! process (same `run_id`, its connection kept). It cannot read the floors Postgres
//! holds nor repair, but it needs neither to stop selling from the rolled-back
//! state: its own floor (the sequence its last call saw) is above the shard's, so
//! its first call finds the shard behind and closes it, in the same script, before
//! it sells. Another process repairs; the cut-off one sells again once it has
//! Postgres back.
use crate::fixtures::{signal, OwnRedis};
use crate::frozen::{sells_the_rest_exactly, setup};
use crate::helpers::*;
use reqwest::StatusCode;
use seckill::app::Mode;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_serve_cut_from_postgres_sells_nothing_from_a_rolled_back_redis() {
    let redis = OwnRedis::snapshots_and_debug();
    let (stock, first) = (40, 10);
    // A (the setup's app) and a frozen worker holding the first orders, published
    // after the snapshot: Redis going back forgets them, the worker has them.
    let mut s = setup(&redis, stock, first, || redis.snapshot()).await;
    // B: a second `serve`, as a Postgres role of its own that can be locked out.
    let role = format!("{}_b", s.ns.db);
    let admin = sqlx::PgPool::connect(&admin_db_url()).await.unwrap();
    sqlx::query(&format!("CREATE ROLE {role} LOGIN"))
        .execute(&admin)
        .await
        .unwrap();
    for grant in [
        format!("GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}"),
        format!("GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}"),
    ] {
        sqlx::query(&grant).execute(s.app.pg()).await.unwrap();
    }
    let url = s.ns.vars["DATABASE_URL"].clone();
    let (scheme, rest) = url.split_once("://").unwrap();
    let host = rest.split_once('@').map_or(rest, |(_, h)| h);
    let b_url = format!("{scheme}://{role}@{host}");
    let b = TestApp::builder(&s.ns)
        .env("REDIS_URL", redis.url())
        .env("DATABASE_URL", b_url)
        .env("SECKILL_MIGRATE_ON_START", "false")
        .mode(Mode::Serve)
        .spawn()
        .await;
    // B answers for the sale: the first shoppers already ordered (and B's floor is
    // the shard's sequence after their orders).
    let (status, body) = b.order(s.v, 1).await;
    assert_eq!(body["error"]["code"], "already_ordered", "{status} {body}");

    // B loses Postgres: its role may not log in, its sessions are cut.
    sqlx::query(&format!("ALTER ROLE {role} NOLOGIN"))
        .execute(&admin)
        .await
        .unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1")
        .bind(&role)
        .execute(&admin)
        .await
        .unwrap();
    // Redis goes back to the snapshot, in the same process: the first orders and
    // their shoppers' marks are gone; B's connection stays.
    redis.reload_last_snapshot();
    let closed_since = Instant::now();
    // The first shoppers try again through B, again and again, for 4 s: B must not
    // sell them (or anyone) anything from the rolled-back state. Its first call
    // finds the shard behind and closes it.
    let until = Instant::now() + Duration::from_secs(4);
    let mut tries = 0;
    while Instant::now() < until {
        for user in 1..=first {
            let (status, body) = b.order(s.v, user).await;
            assert_ne!(
                status,
                StatusCode::ACCEPTED,
                "B, cut from Postgres, sold shopper {user} a second time during the repair: {body}"
            );
            assert!(
                !status.is_server_error() || status == StatusCode::SERVICE_UNAVAILABLE,
                "{status} {body}"
            );
            tries += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("{tries} tries through B after the rollback, none sold");
    let mut conn = s.app.redis().await;
    let open: bool = redis::cmd("EXISTS")
        .arg(s.ns.keys().stock(s.v))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!open, "B's first call closed the shard it found behind");
    signal(&s.worker, "CONT");
    // B gets Postgres back and verifies the repaired server.
    sqlx::query(&format!("ALTER ROLE {role} LOGIN"))
        .execute(&admin)
        .await
        .unwrap();
    sells_the_rest_exactly(&s, stock, &Default::default(), closed_since, "serve cut from Postgres").await;
    selling_again(&b, s.v, 1).await;
    let (_, body) = b.order(s.v, 1).await;
    assert_eq!(body["error"]["code"], "already_ordered", "{body}");
    b.shutdown().await;
    let _ = s.worker.kill();
    let _ = s.worker.wait();
    sqlx::query(&format!("DROP OWNED BY {role}"))
        .execute(s.app.pg())
        .await
        .unwrap();
    let _ = sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1")
        .bind(&role)
        .execute(&admin)
        .await;
    let _ = sqlx::query(&format!("DROP ROLE IF EXISTS {role}"))
        .execute(&admin)
        .await;
}
