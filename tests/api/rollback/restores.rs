//! rollback:
//! `redis_restored_from_an_older_snapshot_sells_no_one_twice_and_loses_nothing`,
//! `redis_restored_from_a_snapshot_while_orders_are_in_flight`,
//! `fencing_tokens_and_the_repair_survive_a_restore`.
use super::*;

/// Nothing is in flight when this restore lands, on purpose: every order is
/// persisted first, so that the restored server holds shoppers and units that
/// Postgres says are sold (the in-flight case is the next test's, which asserts
/// work in flight as its fault lands).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_restored_from_an_older_snapshot_sells_no_one_twice_and_loses_nothing() {
    let ns = Namespace::new().await;
    let mut redis = OwnRedis::snapshots_only();
    // Small id blocks: ids are drawn from Redis often, also after the restore.
    let app = TestApp::builder(&ns)
        .env("REDIS_URL", redis.url())
        .env("SECKILL_ID_BLOCK", "7")
        .spawn()
        .await;
    let stock = 300i64;
    let v = app.flash_sale(stock).await;

    let first = accepted(&wave(&app, v, 1..=100).await);
    assert_eq!(first.len(), 100);
    persisted(&app, &first.values().copied().collect()).await;
    redis.snapshot();
    let second = accepted(&wave(&app, v, 101..=200).await);
    assert_eq!(second.len(), 100);
    persisted(&app, &second.values().copied().collect()).await;

    redis.crash_and_restart();
    // The restored Redis believes shoppers 101..=200 never ordered and holds 200 units.
    let (status, body) = selling_again(&app, v, 150).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "already_ordered", "{body}");
    let again = wave(&app, v, 101..=200).await;
    let twice: Vec<i64> = accepted(&again).into_keys().collect();
    assert!(twice.is_empty(), "shoppers sold twice after the restore: {twice:?}");
    let third = accepted(&wave(&app, v, 1000..1300).await);
    assert_eq!(third.len() as i64, stock - 200, "exactly the stock that was left");
    persisted(&app, &third.values().copied().collect()).await;

    let rows: Vec<(i64, i64, String, Option<String>)> =
        sqlx::query_as("SELECT id, user_id, status, order_no FROM voucher_orders WHERE voucher_id = $1")
            .bind(v)
            .fetch_all(app.pg())
            .await
            .unwrap();
    let all: HashSet<i64> = first
        .values()
        .chain(second.values())
        .chain(third.values())
        .copied()
        .collect();
    assert_eq!(all.len(), 300, "no order id given twice");
    assert_eq!(rows.len(), 300, "every acknowledged order stored once");
    assert!(rows.iter().all(|r| r.2 == "created"), "every 202 reached created");
    // (A shopper or number twice cannot be stored, by the unique indexes; one
    // issued twice is an incident, read at the end.)
    assert!(
        rows.iter().all(|r| r.3.is_some()),
        "every stored order has its business number"
    );
    let pg_stock = stock_in_postgres(&app, v).await;
    assert_eq!(pg_stock, 0, "persisted + remaining = stock");
    let (_, voucher) = app
        .get(&format!("/api/v1/admin/vouchers/{v}"), Some(&app.admin()))
        .await;
    assert_eq!(voucher["stats"]["stock_remaining"], 0, "{voucher}");
    assert_balanced(&app, v).await;
    assert_no_incidents("restored from an older snapshot", &[&app.addr]).await;
}

/// The same restore while a crowd is ordering: some requests land on the old
/// server, some on none, some on the restored one before the repair.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_restored_from_a_snapshot_while_orders_are_in_flight() {
    let ns = Namespace::new().await;
    let mut redis = OwnRedis::snapshots_only();
    let app = Arc::new(
        TestApp::builder(&ns)
            .env("REDIS_URL", redis.url())
            .env("SECKILL_ID_BLOCK", "5")
            .forces_incidents(&["rescued_order"])
            .spawn()
            .await,
    );
    let stock = 200i64;
    let v = app.flash_sale(stock).await;
    let first = accepted(&wave(&app, v, 1..=60).await);
    persisted(&app, &first.values().copied().collect()).await;
    redis.snapshot();
    // Mid-crowd: once a quarter of its 340 requests are answered, while requests
    // are in flight and acknowledged orders are not yet in Postgres (the crowd
    // fails otherwise), the server is restored.
    let redis_ref = &mut redis;
    let crowd = crowd(&app.addr, &app.jwt, app.pg(), v, 61..401, |landing| async move {
        landing.lands().await;
        tokio::task::block_in_place(|| redis_ref.crash_and_restart());
    })
    .await;
    // A list, not a set: an id handed out twice must show as a repeat. Only the
    // crowd's orders may be lost with the server (they alone were admitted after
    // the snapshot and maybe not relayed when it died).
    let mut acknowledged: Vec<i64> = first.values().copied().collect();
    let in_the_crowd: HashSet<i64> = crowd.acknowledged.clone();
    acknowledged.extend(crowd.ids.iter().copied());
    selling_again(&app, v, 99_999).await;
    // Everyone who did not get an answer tries again, and later shoppers come, until
    // Redis says the sale is sold out. (The units of orders lost with the server are
    // back on sale; an instance's sold-out flag, whose clearing event may have been
    // lost while its subscription reconnected, is trusted for a second at most.)
    let retry = wave(&app, v, 61..=400).await;
    acknowledged.extend(accepted(&retry).into_values());
    let stats = format!("/api/v1/admin/vouchers/{v}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut next = 2000;
    loop {
        let (_, voucher) = app.get(&stats, Some(&app.admin())).await;
        if voucher["stats"]["stock_remaining"] == 0 || std::time::Instant::now() > deadline {
            break;
        }
        acknowledged.extend(accepted(&wave(&app, v, next..next + 50).await).into_values());
        next += 50;
        // Waves a fifth of a second apart: the flag lets a probe through each second.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Until Postgres has sold everything (or a minute passed: the checks below tell why).
    let pg = app.pg().clone();
    eventually(Duration::from_secs(60), || {
        let pg = pg.clone();
        async move {
            let left: i32 = sqlx::query_scalar("SELECT stock FROM seckill_vouchers WHERE voucher_id = $1")
                .bind(v)
                .fetch_one(&pg)
                .await
                .ok()?;
            (left == 0).then_some(())
        }
    })
    .await;

    let rows = stored(&app, v).await;
    let live: Vec<_> = rows.iter().filter(|r| r.2 == "created").collect();
    let failed = rows.iter().filter(|r| r.2 == "failed").count();
    println!(
        "rollback in flight: acknowledged {}, stored {}, live {}, failed {failed}",
        acknowledged.len(),
        rows.len(),
        live.len()
    );
    // A shopper sold twice would be refused by a unique index and stored
    // `failed`; a number issued twice is an incident, read at the end.
    assert_eq!(failed, 0, "no acknowledged order failed");
    assert!(
        live.iter().all(|r| r.3.is_some()),
        "every stored order has its business number"
    );
    assert!(live.len() as i64 <= stock, "no oversell");
    let distinct: HashSet<i64> = acknowledged.iter().copied().collect();
    assert_eq!(distinct.len(), acknowledged.len(), "an order id acknowledged twice");
    // An order whose id was already taken is stored under a fresh one, its issued id
    // kept in issued_id: a restored id counter handing ids out again shows there.
    let reissued: Vec<_> = rows.iter().filter_map(|r| r.4).collect();
    assert!(reissued.is_empty(), "order ids issued twice: {reissued:?}");
    // Orders the old server admitted after the snapshot and had not relayed when it
    // died went with it (this Redis keeps nothing but the snapshot: the risk
    // /health/ready reports), but the process that acknowledged them still holds
    // them: it admits them again (each an incident, named). Every acknowledged
    // order is stored.
    let stored: HashSet<i64> = rows.iter().map(|r| r.0).collect();
    let lost: HashSet<i64> = distinct.difference(&stored).copied().collect();
    let rescued = app
        .metric("seckill_worker_incidents_total{kind=\"rescued_order\"}")
        .await;
    println!("rollback in flight: lost with the server and admitted again from memory {rescued}");
    assert!(
        lost.is_empty(),
        "acknowledged orders lost: {lost:?} (of the crowd: {})",
        lost.is_subset(&in_the_crowd)
    );
    let pg_stock = stock_in_postgres(&app, v).await;
    assert_eq!(
        pg_stock as i64,
        stock - live.len() as i64,
        "persisted + remaining = stock"
    );
    assert_balanced(&app, v).await;
    assert_eq!(live.len() as i64, stock, "the whole stock sold");
    assert_no_incidents_but("rollback in flight", &[&app.addr], &["rescued_order"]).await;
}

/// Fencing tokens keep growing across Redis going back in time: a token drawn
/// after the restore is larger than every token this process drew before it. (A
/// counter that came back with the snapshot would hand out tokens a second time,
/// and a stalled holder's write could pass for its successor's.) And two instances
/// both meet the restored sale (each knows, from its own reply or from the floors
/// Postgres recorded, that the shard went back): exactly one repairs it (a
/// Postgres advisory lock per sale: a lock in Redis went back with everything
/// else), the other checks it after and sells on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fencing_tokens_and_the_repair_survive_a_restore() {
    let ns = Namespace::new().await;
    let mut redis = OwnRedis::snapshots_only();
    let url = redis.url();
    let a = TestApp::builder(&ns).env("REDIS_URL", &url).spawn().await;
    let b = TestApp::builder(&ns).env("REDIS_URL", &url).spawn().await;
    let v = a.flash_sale(5).await;
    let owner = a.app().state().handles.locks.owner();
    let first = owner.lock("job").await.unwrap();
    let t1 = first.fence;
    first.release().await.unwrap().expect("released");
    redis.snapshot();
    let mut newest = t1;
    for _ in 0..3 {
        let g = owner.lock("job").await.unwrap();
        newest = g.fence;
        g.release().await.unwrap().expect("released");
    }
    // An order after the snapshot, relayed and stored; `b` reads the floors
    // Postgres recorded (it does once a second).
    let (status, _) = a.order(v, 1).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    wait_stored(&a, v, 1, Duration::from_secs(30), "the order after the snapshot").await;
    b.app().state().recovery.refresh().await.unwrap();
    redis.crash_and_restart();
    // Both instances meet the restored sale: neither sells from it (shopper 1's
    // order was forgotten by it; the first answer that is not a 503 is after the
    // repair, which knows it from Postgres).
    for app in [&a, &b] {
        let (status, body) = selling_again(app, v, 1).await;
        assert_eq!(body["error"]["code"], "already_ordered", "{status} {body}");
    }
    let g = owner.lock("job").await.unwrap();
    assert!(
        g.fence > newest,
        "a token after the restore ({}) is larger than every one before ({newest})",
        g.fence
    );
    g.release().await.unwrap().expect("released");
    let repairs = a.app().state().metrics.redis_repairs.get() + b.app().state().metrics.redis_repairs.get();
    assert_eq!(repairs, 1, "exactly one repair of the restored sale");
    assert_eq!(repairs_of(&a, v).await, 1);
}
