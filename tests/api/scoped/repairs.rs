//! scoped: `a_failover_of_one_master_leaves_the_other_masters_sales_selling`,
//! `a_master_that_lost_a_key_is_repaired_whole_and_the_others_sell_on`,
//! `a_clock_going_back_during_a_scoped_repair_widens_it_to_every_sale`.
use super::*;

/// On a Redis Cluster of the test's own, the master of one sale's keys is killed
/// (-9) while a frozen worker holds that sale's orders; its replica takes over.
/// The repair closes that master's sales alone and waits for the worker; a sale on
/// another master answers 202 throughout the repair, and its orders are published
/// during it. No 500 on either sale; the repaired sale then sells exactly its rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failover_of_one_master_leaves_the_other_masters_sales_selling() {
    let s = on_cluster().await;
    let killed = Instant::now();
    s.cluster.kill(s.master);
    only_the_masters_sales_close(&s, killed, "failover").await;
}

/// One sale's stock key lost (deleted) on a master that is otherwise intact: a
/// master that lost one key may have lost others, so the repair closes every sale
/// on that master, and only those; a sale on another master sells on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_master_that_lost_a_key_is_repaired_whole_and_the_others_sell_on() {
    let s = on_cluster().await;
    let mut conn = s.app.redis().await;
    let _: i64 = redis::cmd("DEL")
        .arg(s.ns.keys().stock(s.target))
        .query_async(&mut conn)
        .await
        .unwrap();
    let lost = Instant::now();
    // The next order of the sale finds its stock missing and starts the repair.
    let (status, body) = s.app.order(s.target, 500).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    only_the_masters_sales_close(&s, lost, "lost key").await;
}

/// A scoped repair under way (a master lost a key; the master of the Redis clock is
/// another) when the clock's master goes back in time in the same process (here:
/// its clock set back): the scope no longer covers what changed. The repair must
/// stop and the next one take every sale, the other sale closing too, rather than
/// finish and leave the other sales on a server that went back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_clock_going_back_during_a_scoped_repair_widens_it_to_every_sale() {
    let s = on_cluster_avoiding(Some(|k| k.clock())).await;
    let mut conn = s.app.redis().await;
    let _: i64 = redis::cmd("DEL")
        .arg(s.ns.keys().stock(s.target))
        .query_async(&mut conn)
        .await
        .unwrap();
    let (status, body) = s.app.order(s.target, 500).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let (during, _) = other_sells_during_repair(&s.app, &s.on_master, s.other, 5).await;
    assert_eq!(during, BTreeMap::from([(202, 5)]), "scoped at first");
    let _: () = redis::cmd("SET")
        .arg(s.ns.keys().clock())
        .arg(0)
        .query_async(&mut conn)
        .await
        .unwrap();
    let widened = eventually(Duration::from_secs(15), || async {
        let state = redis_state(&s.app).await;
        (state["repairing"] == true && state["repair_sales"].is_null()).then_some(())
    })
    .await;
    assert!(
        widened.is_some(),
        "a repair of every sale after the clock went back: {}",
        redis_state(&s.app).await
    );
    let (status, body) = s.app.order(s.other, 200_000).await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "the other sale is closed too: {body}"
    );
    signal(&s.worker, "CONT");
    repaired_sale_sells_the_rest(&s.app, s.target, 300, &s.bought, "clock back").await;
    assert_ne!(
        selling_again(&s.app, s.other, 200_001).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    other_sale_whole(&s.app, s.other, "clock back").await;
}
