//! The relay's messages stay under twice `SECKILL_RELAY_BATCH` orders, however many
//! orders the outbox entries it reads carry (an entry holds every order one call
//! of the order script accepted): a round's orders go in messages of `batch` to
//! `2 × batch − 1` orders.
use crate::helpers::*;
use futures::StreamExt;
use reqwest::StatusCode;
use std::time::Duration;

/// A backlog of coalesced entries (some carrying more orders than a message may)
/// read by a relay with a batch of 4: every message it publishes carries at most
/// 7 orders (its worker persists one message per transaction, so the worker's
/// batch sizes are the messages'), and every order reaches Postgres.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backlog_of_coalesced_entries_is_published_in_messages_within_the_batch() {
    let ns = Namespace::new().await;
    // No relay and no worker here: the orders wait in the outbox.
    let api = TestApp::builder(&ns).api_only().spawn().await;
    let v = api.flash_sale(100_000).await;
    let outbox = ns.keys().outbox(v);
    let mut conn = api.redis().await;
    let (mut next_user, mut placed, mut fattest) = (0i64, 0i64, 0usize);
    for _ in 0..20 {
        let users: Vec<i64> = (next_user + 1..=next_user + 300).collect();
        next_user += 300;
        let api = &api;
        placed += futures::stream::iter(users)
            .map(|u| async move { api.order(v, u).await.0 })
            .buffer_unordered(64)
            .filter(|s| futures::future::ready(*s == StatusCode::ACCEPTED))
            .count()
            .await as i64;
        let entries: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
            .arg(&outbox)
            .arg("-")
            .arg("+")
            .query_async(&mut conn)
            .await
            .unwrap();
        fattest = entries
            .ids
            .iter()
            .filter_map(|e| seckill::ordering::outbox::entry::parse(e, seckill::ordering::outbox::format::NEWEST))
            .map(|e| e.orders.len())
            .max()
            .unwrap_or(0);
        if fattest > 7 {
            break;
        }
    }
    assert!(
        fattest > 7,
        "some call carried more orders than a message may: {fattest}"
    );
    let relay = TestApp::builder(&ns)
        .env("SECKILL_RELAY_BATCH", "4")
        .env("SECKILL_WORKER_PREFETCH", "1")
        .spawn()
        .await;
    wait_stored(&relay, v, placed, Duration::from_secs(60), "the backlog").await;
    // The worker counts a batch just after its commit: wait for the count too.
    let counted = eventually(Duration::from_secs(10), || async {
        (relay.metric("seckill_worker_batch_orders_sum").await >= placed as f64).then_some(())
    })
    .await;
    assert!(counted.is_some(), "the worker counted every stored order");
    let batches = relay.metric("seckill_worker_batch_orders_count").await;
    let within = relay.metric("seckill_worker_batch_orders_bucket{le=\"8\"}").await;
    let orders = relay.metric("seckill_worker_batch_orders_sum").await;
    assert_eq!(orders, placed as f64, "every order once");
    assert!(
        batches >= (placed as f64 / 7.0).ceil(),
        "{batches} messages for {placed} orders"
    );
    // The histogram's buckets are 1, 2, 4, 8, ...: at most 8 is what it can tell,
    // and a message of `batch` orders per entry read (up to 64) would show.
    assert_eq!(within, batches, "every message carries at most 8 orders");
    relay.shutdown().await;
    api.shutdown().await;
}

/// A backlog of messages of 4 to 7 orders waiting in RabbitMQ, taken by a worker
/// whose transactions hold at most 8 orders: a batch gathers messages while they
/// fit, a message that would take it past 8 starts the next batch, and every order
/// is stored once, its unit taken once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_gathers_a_backlog_into_transactions_within_its_batch() {
    let ns = Namespace::new().await;
    // API and relay, no worker: the orders wait in RabbitMQ.
    let api = TestApp::builder(&ns)
        .worker(false)
        .env("SECKILL_RELAY_BATCH", "4")
        .spawn()
        .await;
    let stock = 1_000;
    let v = api.flash_sale(stock).await;
    let api_ref = &api;
    let placed = futures::stream::iter(1..=300i64)
        .map(|u| async move { api_ref.order(v, u).await.0 })
        .buffer_unordered(64)
        .filter(|s| futures::future::ready(*s == StatusCode::ACCEPTED))
        .count()
        .await as i64;
    assert_eq!(placed, 300, "every shopper's order is accepted");
    wait_relayed(&api, ns.keys().outbox(v)).await;

    // A second instance with a worker (it serves `/metrics` too).
    let worker = TestApp::builder(&ns).env("SECKILL_WORKER_BATCH", "8").spawn().await;
    wait_stored(&worker, v, placed, Duration::from_secs(60), "the backlog").await;
    let counted = eventually(Duration::from_secs(10), || async {
        (worker.metric("seckill_worker_batch_orders_sum").await >= placed as f64).then_some(())
    })
    .await;
    assert!(counted.is_some(), "the worker counted every stored order");
    let orders = worker.metric("seckill_worker_batch_orders_sum").await;
    let batches = worker.metric("seckill_worker_batch_orders_count").await;
    let within = worker.metric("seckill_worker_batch_orders_bucket{le=\"8\"}").await;
    assert_eq!(orders, placed as f64, "every order once");
    assert_eq!(within, batches, "every transaction holds at most 8 orders");
    assert_eq!(stored_orders(&worker, v).await, Some(placed), "every order stored once");
    let left: i32 = sqlx::query_scalar("SELECT stock FROM seckill_vouchers WHERE voucher_id = $1")
        .bind(v)
        .fetch_one(worker.pg())
        .await
        .unwrap();
    assert_eq!(left as i64, stock - placed, "each order took its unit once");
    worker.shutdown().await;
    api.shutdown().await;
}
