//! RabbitMQ's memory alarm holds every publish while Redis restarts with its data:
//! relays have recorded their batches (intents) and wait for confirms that do not
//! come. The repair must count those orders (still in their outboxes, unacknowledged)
//! and sell none of them again; once the alarm clears, everything is stored once.
use crate::fixtures::{require_root, OwnRabbit, OwnRedis};
use crate::helpers::*;
use reqwest::StatusCode;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs root: runs a RabbitMQ node of its own (CI runs as root and includes it)"]
async fn a_publish_held_by_the_memory_alarm_across_a_redis_restart_is_sold_once() {
    require_root();
    let ns = Namespace::new().await;
    let rabbit = tokio::task::spawn_blocking(OwnRabbit::new).await.unwrap();
    let mut redis = OwnRedis::aof_always();
    let app = TestApp::builder(&ns)
        .env("AMQP_URL", rabbit.url())
        .env("REDIS_URL", redis.url())
        .spawn()
        .await;
    let (stock, first) = (40i64, 10i64);
    let v = app.flash_sale(stock).await;
    // One order through, so that the relay and the worker are connected.
    assert_eq!(app.order(v, 1).await.0, StatusCode::ACCEPTED);
    wait_stored(&app, v, 1, Duration::from_secs(20), "the first order").await;
    {
        let rabbit = &rabbit;
        tokio::task::block_in_place(|| rabbit.memory_alarm(true));
    }
    let held = accepted(&wave(&app, v, 2..=first).await);
    assert_eq!(held.len() as i64, first - 1);
    // The relay has recorded them (intents) and cannot publish: not stored.
    let intents: i64 = eventually(Duration::from_secs(10), || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM relay_intents")
            .fetch_one(app.pg())
            .await
            .ok()?;
        (n > 0).then_some(n)
    })
    .await
    .expect("the relay recorded a batch it could not publish");
    println!("intents recorded under the alarm: {intents}");
    redis.crash_and_restart();
    // The repair counts the held orders from their outbox: their shoppers already
    // ordered, and the sale sells again while the alarm still holds the publishes.
    let (status, body) = selling_again(&app, v, 2).await;
    assert_eq!(body["error"]["code"], "already_ordered", "{status} {body}");
    let again = wave(&app, v, 1..=first).await;
    let twice: Vec<i64> = accepted(&again).into_keys().collect();
    assert!(twice.is_empty(), "shoppers sold twice across the repair: {twice:?}");
    {
        let rabbit = &rabbit;
        tokio::task::block_in_place(|| rabbit.memory_alarm(false));
    }
    let rest = accepted(&wave(&app, v, 100..100 + 2 * stock).await);
    assert_eq!(rest.len() as i64, stock - first, "exactly the stock that was left");
    wait_stored(&app, v, stock, Duration::from_secs(60), "once the alarm cleared").await;
    let rows: Vec<(i64, String, Option<String>)> =
        sqlx::query_as("SELECT user_id, status, order_no FROM voucher_orders WHERE voucher_id = $1")
            .bind(v)
            .fetch_all(app.pg())
            .await
            .unwrap();
    assert_eq!(rows.len() as i64, stock, "every acknowledged order stored once");
    assert!(rows.iter().all(|r| r.1 == "created"), "nothing failed: {rows:?}");
    // (A shopper or number twice cannot be stored, by the unique indexes; one
    // issued twice is an incident, read when the instance ends.)
    assert!(
        rows.iter().all(|r| r.2.is_some()),
        "every stored order has its business number"
    );
    assert_balanced(&app, v).await;
    app.shutdown().await;
}
