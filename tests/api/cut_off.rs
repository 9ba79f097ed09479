//! A `serve` process cut off from Postgres across a repair. It cannot check the
//! Redis epoch, so it goes on trusting the one it verified last; when Redis goes
//! back in time in the same process (same `run_id`, its connection kept), only the
//! repair that another process runs can stop it. The repair closes every sale the
//! moment it has its epoch, before its barrier waits: the cut-off process's
//! orders find no stock and it stops selling, rather than selling the rolled-back
//! state (shoppers whose orders Redis forgot) for as long as the barrier waits.
use crate::barrier::{sells_the_rest_exactly, setup};
use crate::fixtures::{signal, OwnRedis};
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
    current_epoch(&b).await;
    // B answers for the sale: the first shoppers already ordered.
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
    // A notices (the Redis clock is behind what Postgres recorded) and repairs; its
    // barrier waits for the frozen worker.
    let identity = s.app.app().state().redis.identity().clone();
    eventually(Duration::from_secs(10), || {
        let identity = identity.clone();
        async move { identity.get().is_some_and(|v| v.repairing).then_some(()) }
    })
    .await
    .expect("A notices that Redis went back and repairs");
    // The repair has closed the sale when its stock key is gone (probes sent before
    // that would race the close, which no process can avoid: the check runs once a
    // second). Waited for up to 3 s, then the probes go anyway: they show the harm.
    let conn = s.app.redis().await;
    let stock_key = s.ns.keys().stock(s.v);
    let closed = eventually(Duration::from_secs(3), || {
        let (mut conn, key) = (conn.clone(), stock_key.clone());
        async move {
            let n: i64 = redis::cmd("EXISTS").arg(&key).query_async(&mut conn).await.ok()?;
            (n == 0).then_some(())
        }
    })
    .await;
    println!("the repair closed the sale: {}", closed.is_some());
    // The first shoppers try again through B, again and again, for 4 s: B must not
    // sell them (or anyone) anything from the rolled-back state.
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
    println!("{tries} tries through B during the repair, none sold");
    signal(&s.worker, "CONT");
    // B gets Postgres back and verifies the repaired server.
    sqlx::query(&format!("ALTER ROLE {role} LOGIN"))
        .execute(&admin)
        .await
        .unwrap();
    sells_the_rest_exactly(&s, stock, first, closed_since, "serve cut from Postgres").await;
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
