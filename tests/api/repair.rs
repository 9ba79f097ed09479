//! Repairing a sale in Redis from Postgres and the outbox, and what fences the
//! repair: it waits for orders still in a worker's hands, a repairer that lost the
//! race cannot write, and counter keys of two epochs never hand out a value twice.
use crate::fixtures::{signal, spawn_worker_binary};
use crate::helpers::*;
use reqwest::StatusCode;
use std::time::Duration;

/// A worker holds orders it received and has not persisted (here: frozen with
/// SIGSTOP, as a process stalled in a long pause would be) while Redis loses the
/// sale. The repair must wait for what is in the worker's hands: rebuilding without
/// those orders would sell their units and their shoppers again. (A queue's ready
/// count alone does not show a worker's unacknowledged deliveries: a repair judging
/// the queue drained by it would reopen the sale without them.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_repair_waits_for_the_orders_in_a_workers_hands() {
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
    // While the worker holds those orders, the sale stays closed, however long: the
    // freeze outlasts any "worker seen lately" window (a frozen worker stops beating;
    // an earlier repair took it for dead after 5 s and reopened the sale without its
    // orders). Probed every 100 ms for 8 s.
    let until = lost_at + Duration::from_secs(8);
    let mut probe = 100;
    while std::time::Instant::now() < until {
        let (status, body) = app.order(v, probe).await;
        assert_eq!(
            status,
            StatusCode::SERVICE_UNAVAILABLE,
            "the sale reopened while a worker held orders: {body}"
        );
        probe += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // An operator sees the repair waiting, and why: the four orders.
    let (status, state) = app.get("/api/v1/admin/redis", Some(&app.admin())).await;
    assert_eq!(status, StatusCode::OK, "{state}");
    println!("admin view during the freeze: {state}");
    assert_eq!(state["repairing"], true, "{state}");
    assert_eq!(state["repair_waiting_orders"], 4, "{state}");
    assert!(
        state["repair_reason"].as_str().is_some_and(|r| r.contains("4 order")),
        "{state}"
    );
    signal(&worker, "CONT");
    selling_again(&app, v, 1).await;
    println!("the sale was closed {} ms", lost_at.elapsed().as_millis());
    let (_, state) = app.get("/api/v1/admin/redis", Some(&app.admin())).await;
    assert_eq!(
        (state["repairing"].clone(), state["repair_waiting_orders"].clone()),
        (serde_json::json!(false), serde_json::json!(0)),
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

/// A repair that lost the race (an older epoch) cannot write a sale any more.
#[tokio::test]
async fn a_stale_repair_cannot_write_a_sale() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(5).await;
    let epoch = current_epoch(&app).await;
    let k = ns.keys();
    let script = redis::Script::new(include_str!("../../lua/sale_restore.lua"));
    let mut redis = app.redis().await;
    let run = |e: i64, op: &str| {
        let mut inv = script.key(k.stock(v));
        inv.key(k.buyers(v))
            .key(k.admitted(v))
            .key(k.returned(v))
            .key(k.outbox(v))
            .key(k.repair_fence(v))
            .key(k.given_at(v, 0, 1))
            .key(k.moved_at(v, 0, 1))
            .key(k.taken_at(v, 0, 1))
            .key(k.orders(v))
            .arg(e)
            .arg(op);
        inv
    };
    let taken: i64 = run(epoch + 5, "reset").invoke_async(&mut redis).await.unwrap();
    assert_eq!(taken, 1);
    let stale: i64 = run(epoch + 4, "reset").invoke_async(&mut redis).await.unwrap();
    assert_eq!(stale, 0, "an older repair cannot reset the sale");
    let mut open = run(epoch + 4, "open");
    open.arg(100).arg("relay");
    let stale: i64 = open.invoke_async(&mut redis).await.unwrap();
    assert_eq!(stale, 0, "nor open it with its stock");
    let stock: Option<i64> = redis::cmd("GET").arg(k.stock(v)).query_async(&mut redis).await.unwrap();
    assert_eq!(stock, None);
}
