//! Postgres going back in time under the repairs' own rows: an
//! asynchronous standby promoted, or a point-in-time restore, forgets what
//! Postgres recorded last, the generation a repair took (`sale_states.gen`) and
//! the shards' floors the relays recorded (`shard_floors`) among it. The orders
//! such a Postgres forgets are lost (docs/DEPLOYMENT.md, "Clustered RabbitMQ and
//! Postgres"); the ids and numbers it forgets are caught by the witness
//! (`counter_ranges.rs`). This is the rest: the recovery rows alone go back.
use super::*;

/// A repair took generation G and Postgres recorded it; Postgres then goes back
/// to before that repair (G-1, no floors), and Redis goes back again, so that
/// the next repair takes G a second time, over shards already at G. Nobody is
/// sold twice, every acknowledged order is stored once, no id repeats, the
/// stock is sold exactly, the books balance and no incident is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_postgres_that_forgot_a_repairs_generation_sells_no_one_twice() {
    let ns = Namespace::new().await;
    let mut redis = OwnRedis::snapshots_only();
    let app = TestApp::builder(&ns).env("REDIS_URL", redis.url()).spawn().await;
    let stock = 300i64;
    let v = app.flash_sale(stock).await;
    let (mut acknowledged, mut ids) = (HashSet::new(), Vec::new());
    let mut take = |answers: &HashMap<i64, (StatusCode, serde_json::Value)>| {
        let got = accepted(answers);
        ids.extend(got.values().copied());
        got
    };

    // Redis goes back once: a repair takes the sale's next generation.
    acknowledged.extend(take(&wave(&app, v, 1..=60).await).into_values());
    assert_eq!(acknowledged.len(), 60);
    redis.snapshot();
    acknowledged.extend(take(&wave(&app, v, 61..=120).await).into_values());
    assert_eq!(acknowledged.len(), 120);
    persisted(&app, &acknowledged).await;
    redis.crash_and_restart();
    let (status, body) = selling_again(&app, v, 90).await;
    assert_eq!(status, StatusCode::CONFLICT, "shopper 90 ordered before: {body}");
    let gen = generation(&app, v).await;
    assert!(gen >= 1, "the repair took a generation: {gen}");

    // Orders at that generation, then Redis's snapshot of them, then more.
    acknowledged.extend(take(&wave(&app, v, 200..=260).await).into_values());
    assert_eq!(acknowledged.len(), 181);
    persisted(&app, &acknowledged).await;
    redis.snapshot();
    acknowledged.extend(take(&wave(&app, v, 261..=320).await).into_values());
    assert_eq!(acknowledged.len(), 241);
    persisted(&app, &acknowledged).await;

    // Postgres goes back to before the repair: its generation and the floors
    // recorded since are forgotten. Then Redis goes back to the snapshot, which
    // forgot shoppers 261..=320: the repair of it takes `gen` again.
    sqlx::query("UPDATE sale_states SET gen = $2 - 1 WHERE voucher_id = $1")
        .bind(v)
        .bind(gen)
        .execute(app.pg())
        .await
        .unwrap();
    sqlx::query("DELETE FROM shard_floors").execute(app.pg()).await.unwrap();
    let repairs = repairs_of(&app, v).await;
    redis.crash_and_restart();
    let (status, body) = selling_again(&app, v, 300).await;
    assert_eq!(status, StatusCode::CONFLICT, "shopper 300 ordered before: {body}");
    assert!(repairs_of(&app, v).await > repairs, "the second rollback was repaired");
    let again = accepted(&wave(&app, v, (1..=120).chain(200..=320)).await);
    assert!(
        again.is_empty(),
        "shoppers sold twice: {:?}",
        again.keys().collect::<Vec<_>>()
    );

    // The rest of the stock, exactly.
    let left = stock - acknowledged.len() as i64;
    let rest = take(&wave(&app, v, 1000..1400).await);
    assert_eq!(rest.len() as i64, left, "exactly the stock that was left");
    acknowledged.extend(rest.into_values());
    persisted(&app, &acknowledged).await;
    let rows = stored(&app, v).await;
    let distinct: HashSet<i64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "no order id given twice");
    assert_eq!(rows.len() as i64, stock, "every acknowledged order stored once");
    assert!(rows.iter().all(|r| r.2 == "created"), "every 202 reached created");
    let pg_stock = stock_in_postgres(&app, v).await;
    assert_eq!(pg_stock, 0, "persisted + remaining = stock");
    println!(
        "postgres forgot generation {gen}: generation now {}, repairs {}",
        generation(&app, v).await,
        repairs_of(&app, v).await
    );
    assert_balanced(&app, v).await;
    assert_no_incidents("postgres forgot a repair's generation", &[&app.addr]).await;
    app.shutdown().await;
}

async fn generation(app: &TestApp, voucher: i64) -> i64 {
    sqlx::query_scalar("SELECT gen FROM sale_states WHERE voucher_id = $1")
        .bind(voucher)
        .fetch_one(app.pg())
        .await
        .unwrap()
}
