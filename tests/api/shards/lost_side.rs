//! A stock return, and a top-up, that the replicas of its shard's master never
//! received, then that master killed -9 (`SECKILL_REDIS_WAIT_REPLICAS=1`, two
//! replicas per master, see [`super::doomed`]): the write is not acknowledged,
//! so it stays pending in Postgres and is applied again on the promoted master,
//! once. The units it brings sell exactly once.
use super::doomed::{node, on_a_cluster, sell_all, Doomed};
use super::*;

const STOCK: i64 = 40;
const SHARDS: u32 = 8;

/// Sells the whole stock to shoppers 1..=60 and waits until every order is
/// stored; returns them by shopper.
async fn sold_out(app: &TestApp, v: i64) -> HashMap<i64, i64> {
    let sold = sell_all(app, v, &(1..=60).collect::<Vec<_>>(), "the first crowd").await;
    assert_eq!(sold.len() as i64, STOCK, "the whole stock sold");
    let stored = eventually(Duration::from_secs(60), || async {
        let n: i64 =
            sqlx::query_scalar("SELECT count(*) FROM voucher_orders WHERE voucher_id = $1 AND status = 'created'")
                .bind(v)
                .fetch_one(app.pg())
                .await
                .ok()?;
        (n == STOCK).then_some(())
    })
    .await;
    assert!(stored.is_some(), "every order stored within 60 s");
    sold
}

/// How many of `table` (`stock_returns` or `stock_topups`) of sale `v` are pending.
async fn pending(app: &TestApp, table: &str, v: i64) -> i64 {
    let sql = format!("SELECT count(*) FROM {table} WHERE voucher_id = $1 AND done_at IS NULL");
    sqlx::query_scalar(&sql).bind(v).fetch_one(app.pg()).await.unwrap()
}

/// `SCARD key` on the node on `port`.
async fn members(port: u16, key: &str) -> i64 {
    redis::cmd("SCARD")
        .arg(key)
        .query_async(&mut node(port).await)
        .await
        .unwrap()
}

/// Waits until nothing of `table` (`stock_returns` or `stock_topups`) of sale `v`
/// is pending.
async fn applied(app: &TestApp, table: &str, v: i64) {
    let sql = format!("SELECT count(*) FROM {table} WHERE voucher_id = $1 AND done_at IS NULL");
    let done = eventually(Duration::from_secs(60), || async {
        let n: i64 = sqlx::query_scalar(&sql).bind(v).fetch_one(app.pg()).await.ok()?;
        (n == 0).then_some(())
    })
    .await;
    assert!(done.is_some(), "{table} of sale {v} applied within 60 s");
}

/// `user` cancels `order`.
async fn cancel(app: &TestApp, user: i64, order: i64) {
    let (status, body) = app
        .post(
            &format!("/api/v1/orders/{order}/cancel"),
            Some(&app.shopper(user)),
            json!({}),
        )
        .await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("cancelled")),
        "{body}"
    );
}

/// The admin adds `units` to sale `v`.
async fn top_up(app: &TestApp, v: i64, units: i64) {
    let (status, body) = app
        .post(
            &format!("/api/v1/admin/vouchers/{v}/stock"),
            Some(&app.admin()),
            json!({"add": units}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_return_its_replicas_missed_then_its_master_killed_is_applied_once() {
    let ns = Namespace::new().await;
    let (cluster, app) = on_a_cluster(&ns, 1, &[]).await;
    let v = app.sharded_sale(STOCK, SHARDS).await;
    let keys = ns.keys();
    let sold = sold_out(&app, v).await;
    let mut orders = sold.iter().map(|(&u, &id)| (u, id));
    // A first return while every replica runs: the replicas' link is open before
    // the fault (opened while a replica is stopped, it waits for that replica).
    let (first_user, first_order) = orders.next().unwrap();
    cancel(&app, first_user, first_order).await;
    applied(&app, "stock_returns", v).await;
    let (user, order) = orders.next().unwrap();
    let k = shard_of(user, SHARDS);
    let fault = Doomed::stop_replicas(&cluster, &keys.stock_at(v, k, SHARDS), 2).await;
    cancel(&app, user, order).await;
    assert_eq!(
        pending(&app, "stock_returns", v).await,
        1,
        "short of its replicas: pending"
    );
    let returned = &keys.returned_at(v, k, SHARDS);
    let before = if shard_of(first_user, SHARDS) == k { 1 } else { 0 };
    fault
        .kill(
            "the return",
            |port| async move { members(port, returned).await - before },
        )
        .await;
    applied(&app, "stock_returns", v).await;
    // The two units are back once: two of sixty new shoppers get them.
    let again = sell_all(&app, v, &(61..=120).collect::<Vec<_>>(), "after the return").await;
    assert_eq!(again.len(), 2, "the returned units sold once each: {again:?}");
    let tally = Tally {
        acknowledged: sold.values().chain(again.values()).copied().collect(),
        ..Default::default()
    };
    settle("a return lost in a failover", &app, v, STOCK, &tally).await;
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_top_up_its_replicas_missed_then_its_master_killed_is_applied_once() {
    let ns = Namespace::new().await;
    let (cluster, app) = on_a_cluster(&ns, 1, &[]).await;
    let v = app.sharded_sale(STOCK, SHARDS).await;
    let keys = ns.keys();
    let sold = sold_out(&app, v).await;
    // A first top-up (of one unit, to shard 0) while every replica runs: the
    // replicas' link is open before the fault.
    top_up(&app, v, 1).await;
    applied(&app, "stock_topups", v).await;
    // Two units to each shard; shard 0's part on the master that dies.
    let added = 2 * i64::from(SHARDS);
    let fault = Doomed::stop_replicas(&cluster, &keys.stock_at(v, 0, SHARDS), 2).await;
    top_up(&app, v, added).await;
    assert_eq!(
        pending(&app, "stock_topups", v).await,
        1,
        "short of its replicas: pending"
    );
    let topups = &keys.topups_at(v, 0, SHARDS);
    fault
        .kill("the top-up", |port| async move { members(port, topups).await - 1 })
        .await;
    applied(&app, "stock_topups", v).await;
    let again = sell_all(&app, v, &(61..=140).collect::<Vec<_>>(), "after the top-up").await;
    assert_eq!(again.len() as i64, added + 1, "the units added sold once each");
    let tally = Tally {
        acknowledged: sold.values().chain(again.values()).copied().collect(),
        ..Default::default()
    };
    settle("a top-up lost in a failover", &app, v, STOCK + added + 1, &tally).await;
    app.shutdown().await;
}
