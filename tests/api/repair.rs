//! Repairing a sale in Redis from Postgres, the relays' intents and the outbox,
//! and what fences the repair: it counts orders still in a worker's hands without
//! waiting for them, and a repairer that lost the race cannot write.
use crate::fixtures::{signal, spawn_worker_binary};
use crate::helpers::*;
use reqwest::StatusCode;
use std::time::Duration;

/// A worker holds orders it received and has not persisted (here: frozen with
/// SIGSTOP, as a process stalled in a long pause would be) while Redis loses the
/// sale. Rebuilding without those orders would sell their units and their shoppers
/// again; waiting for the worker would keep the sale shut for as long as it is
/// frozen. The relays' intents name them (each order's shopper and time): the
/// repair counts them and reopens the sale while the worker is still frozen.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_repair_counts_the_orders_in_a_workers_hands_without_waiting() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns).worker(false).spawn().await;
    let stock = 10i64;
    let v = app.flash_sale(stock).await;
    let mut worker = spawn_worker_binary(&ns, &[]).await;
    signal(&worker, "STOP");
    for u in 1..=4 {
        assert_eq!(app.order(v, u).await.0, StatusCode::ACCEPTED);
    }
    // The relay has published them: they sit in the frozen worker's socket, delivered
    // and unacknowledged, not ready in the queue.
    let mut redis = app.redis().await;
    let outbox = ns.keys().outbox(v);
    eventually(Duration::from_secs(10), || {
        let (mut redis, outbox) = (redis.clone(), outbox.clone());
        async move {
            let n: i64 = redis::cmd("XLEN").arg(&outbox).query_async(&mut redis).await.ok()?;
            (n == 0).then_some(())
        }
    })
    .await
    .expect("the relay published the orders");
    // The setup, checked: published (the relay acknowledges outbox entries once the
    // broker confirmed them), not ready in the queue, not in Postgres, and the
    // frozen worker the queue's one consumer: delivered to it and unacknowledged.
    // (The broker's own unacknowledged count, through rabbitmqctl, lags by its
    // statistics interval; these are read live.) That they were not lost shows at
    // the end: every order persisted.
    let (conn, ch) = ns.broker().open().await.unwrap();
    let q = ch
        .queue_declare(
            ns.keys().orders_queue().into(),
            lapin::options::QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            lapin::types::FieldTable::default(),
        )
        .await
        .unwrap();
    let _ = conn.close(200, "checked".into()).await;
    let in_pg: i64 = sqlx::query_scalar("SELECT count(*) FROM voucher_orders WHERE voucher_id = $1")
        .bind(v)
        .fetch_one(app.pg())
        .await
        .unwrap();
    println!(
        "orders queue: {} ready, {} consumer(s); {in_pg} in Postgres",
        q.message_count(),
        q.consumer_count()
    );
    assert_eq!(
        (q.message_count(), q.consumer_count(), in_pg),
        (0, 1, 0),
        "the setup: the orders in the frozen worker's hands, not ready, not persisted"
    );
    // Redis loses the sale.
    let k = ns.keys();
    let _: () = redis::cmd("DEL")
        .arg(k.stock(v))
        .arg(k.buyers(v))
        .arg(k.admitted(v))
        .query_async(&mut redis)
        .await
        .unwrap();
    let lost_at = std::time::Instant::now();
    // The first order meets the lost sale: refused, and the repair asked for.
    let (status, body) = app.order(v, 100).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    // Open again while the worker is still frozen.
    let (status, body) = selling_again(&app, v, 1).await;
    let closed = lost_at.elapsed();
    assert_eq!(body["error"]["code"], "already_ordered", "{status} {body}");
    println!(
        "the sale was closed {} ms, the worker frozen all along",
        closed.as_millis()
    );
    // An operator sees the repair and how long it kept the sale closed.
    let (status, state) = app.get("/api/v1/admin/redis", Some(&app.admin())).await;
    assert_eq!(status, StatusCode::OK, "{state}");
    let sale = state["sales"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["voucher_id"].as_str() == Some(v.to_string().as_str()))
        .cloned()
        .unwrap_or_else(|| panic!("the sale in the admin view: {state}"));
    assert_eq!(
        (sale["closed"].clone(), sale["repairs"].clone()),
        (false.into(), 1.into()),
        "{state}"
    );
    assert!(
        sale["closed_ms"].as_i64().unwrap() <= closed.as_millis() as i64 + 1000,
        "{state}"
    );
    for u in 1..=4 {
        let (_, body) = app.order(v, u).await;
        assert_eq!(body["error"]["code"], "already_ordered", "shopper {u}");
    }
    let answers = wave(&app, v, 5..=30).await;
    assert_eq!(
        accepted(&answers).len() as i64,
        stock - 4,
        "exactly the stock that was left"
    );
    let in_pg: i64 = sqlx::query_scalar("SELECT count(*) FROM voucher_orders WHERE voucher_id = $1")
        .bind(v)
        .fetch_one(app.pg())
        .await
        .unwrap();
    assert_eq!(in_pg, 0, "still frozen: the stock sold out without the worker");
    signal(&worker, "CONT");
    wait_stored(&app, v, stock, Duration::from_secs(30), "every order persisted").await;
    let statuses: Vec<String> = sqlx::query_scalar("SELECT status FROM voucher_orders WHERE voucher_id = $1")
        .bind(v)
        .fetch_all(app.pg())
        .await
        .unwrap();
    assert!(statuses.iter().all(|s| s == "created"), "{statuses:?}");
    assert_balanced(&app, v).await;
    let _ = worker.kill();
    let _ = worker.wait();
}

/// A repair that lost the race (an older generation) cannot write a sale any more,
/// and a repair's step finds the shard exactly where its previous step left it or
/// stops.
#[tokio::test]
async fn a_stale_repair_cannot_write_a_sale() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(100).await;
    let k = ns.keys();
    let script = redis::Script::new(seckill::shard_script!("sale_restore"));
    let mut redis = app.redis().await;
    let run = |gen: i64, op: &str, at: i64| {
        let mut inv = script.key(k.stock(v));
        inv.key(k.buyers(v))
            .key(k.admitted(v))
            .key(k.returned(v))
            .key(k.outbox(v))
            .key(k.seq_at(v, 0, 1))
            .key(k.given_at(v, 0, 1))
            .key(k.moved_at(v, 0, 1))
            .key(k.taken_at(v, 0, 1))
            .key(k.orders(v))
            .key(k.topups_at(v, 0, 1))
            .key(k.hist_at(v, 0, 1))
            .arg(gen)
            .arg(op)
            .arg(at)
            .arg(seckill::recovery::history::fresh_name().as_slice());
        inv
    };
    let (ok, seq): (i64, i64) = run(5, "close", 0).invoke_async(&mut redis).await.unwrap();
    assert_eq!((ok, seq), (1, 5 << 32));
    let (stale, _): (i64, i64) = run(4, "close", 0).invoke_async(&mut redis).await.unwrap();
    assert_eq!(stale, 0, "an older repair cannot close the sale");
    let (again, _): (i64, i64) = run(5, "close", 0).invoke_async(&mut redis).await.unwrap();
    assert_eq!(again, 1, "its own generation closes it again while nothing wrote since");
    let mut open = run(4, "open", seq);
    open.arg(100).arg("relay");
    let (stale, _): (i64, i64) = open.invoke_async(&mut redis).await.unwrap();
    assert_eq!(stale, 0, "nor open it with its stock");
    let mut open = run(5, "open", seq + 1);
    open.arg(100).arg("relay");
    let (moved, _): (i64, i64) = open.invoke_async(&mut redis).await.unwrap();
    assert_eq!(moved, 0, "nor a step that expects the shard elsewhere");
    let stock: Option<i64> = redis::cmd("GET").arg(k.stock(v)).query_async(&mut redis).await.unwrap();
    assert_eq!(stock, None);
    let mut open = run(5, "open", seq);
    open.arg(100).arg("relay");
    let (ok, after): (i64, i64) = open.invoke_async(&mut redis).await.unwrap();
    assert_eq!((ok, after), (1, seq + 1), "the repair's own next step");
    let (closed, _): (i64, i64) = run(5, "close", 0).invoke_async(&mut redis).await.unwrap();
    assert_eq!(
        closed, 0,
        "a generation written in is not closed again: a repair takes the next"
    );
}

/// A repair's lease (300 ms here) shorter than one of its reads (Postgres's orders,
/// locked by the test for 2 s): the repairer renews the lease while it waits, so
/// the other instance never takes the sale over. One repair, the generation moves
/// once, the sale reopens on both instances and sells exactly its stock.
#[tokio::test]
async fn a_repair_slower_than_its_lease_keeps_it_and_moves_the_generation_once() {
    let ns = Namespace::new().await;
    let a = TestApp::builder(&ns)
        .env("SECKILL_REPAIR_LEASE_MS", "300")
        .spawn()
        .await;
    let b = TestApp::builder(&ns)
        .env("SECKILL_REPAIR_LEASE_MS", "300")
        .api_only()
        .spawn()
        .await;
    let stock = 10i64;
    let v = a.flash_sale(stock).await;
    for u in 1..=3 {
        assert_eq!(a.order(v, u).await.0, StatusCode::ACCEPTED);
    }
    let state = |app: &TestApp| {
        let pg = app.pg().clone();
        async move {
            sqlx::query_as::<_, (i64, i32)>("SELECT gen, repairs FROM sale_states WHERE voucher_id = $1")
                .bind(v)
                .fetch_optional(&pg)
                .await
                .unwrap()
                .unwrap_or((0, 0))
        }
    };
    let (gen, repairs) = state(&a).await;
    let mut lock = a.pg().begin().await.unwrap();
    sqlx::query("LOCK TABLE voucher_orders IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    let mut redis = a.redis().await;
    let gone: i64 = redis::cmd("DEL")
        .arg(ns.keys().stock_at(v, 0, 1))
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(gone, 1);
    // Both instances find the shard lost and ask for the repair.
    assert_eq!(a.order(v, 4).await.0, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(b.order(v, 5).await.0, StatusCode::SERVICE_UNAVAILABLE);
    // While the read waits: one holder of the lease throughout (a lease that ran
    // out would pass to the other instance, which asks for the repair each second).
    let mut holders = std::collections::HashSet::new();
    let until = std::time::Instant::now() + Duration::from_secs(2);
    while std::time::Instant::now() < until {
        let holder: Option<String> = sqlx::query_scalar("SELECT repairer FROM sale_states WHERE voucher_id = $1")
            .bind(v)
            .fetch_optional(a.pg())
            .await
            .unwrap()
            .flatten();
        holders.extend(holder);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    lock.rollback().await.unwrap();
    assert_eq!(
        holders.len(),
        1,
        "one repairer held the lease all the while: {holders:?}"
    );
    repaired_after(&a, v, repairs).await;
    let (s, body) = selling_again(&b, v, 5).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{body}");
    let (s, body) = selling_again(&a, v, 4).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{body}");
    assert_eq!(state(&a).await, (gen + 1, repairs + 1), "one repair, one generation");
    let mut sold = 5;
    for u in 6..=30 {
        let app = if u % 2 == 0 { &a } else { &b };
        match app.order(v, u).await {
            (StatusCode::ACCEPTED, _) => sold += 1,
            (StatusCode::CONFLICT, body) => assert_eq!(code(&body), "sold_out", "{body}"),
            (other, body) => panic!("shopper {u}: {other} {body}"),
        }
    }
    assert_eq!(sold, stock);
    assert_balanced(&a, v).await;
}
