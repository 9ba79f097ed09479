//! A call out while its sale is closed: the desk takes the shards' logs of
//! acknowledged orders when it closes a sale (a shard found lost or behind here,
//! or Postgres saying another process closed it), and a call whose reply comes
//! back after that must hand its orders to the desk itself. Left in the log, they
//! would wait for a next call on the shard that a sold-out or ended sale never
//! makes, and if Redis lost their entries, nobody would write them back.
use super::named::{again_until_accepted, order_id, serve, settled, worker};
use super::*;

/// A's call for shopper X is held by Redis (`CLIENT PAUSE … WRITE`) while A's desk
/// closes the sale (as its refresh does when another process closed it); the call
/// then admits X (202). X's order is not left in the shard's log: it went to the
/// desk, and it is stored once a relay runs, X's only order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_order_whose_call_comes_back_after_its_sale_closed_goes_to_the_desk() {
    let ns = Namespace::new().await;
    let redis = OwnRedis::snapshots_and_debug();
    let a = Arc::new(serve(&ns, &redis, false, &[]).await);
    let w = worker(&ns, &redis).await;
    let v = a.flash_sale(100).await;
    let warm = again_until_accepted(&a, v, 3).await;
    let state = a.app().state().clone();
    let calls = state.metrics.reserve_batch.get_sample_count();
    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "1500", "WRITE"]).as_deref(), Some("OK"));
    let order = {
        let a = a.clone();
        tokio::spawn(async move { a.order(v, 1).await })
    };
    eventually(Duration::from_secs(10), || async {
        (state.metrics.reserve_batch.get_sample_count() > calls).then_some(())
    })
    .await
    .expect("X's call left within 10 s");
    state.recovery.lost(v, "closed by another process (the test)");
    let (status, body) = order.await.unwrap();
    assert_eq!(status, StatusCode::ACCEPTED, "X's call ran once Redis went on: {body}");
    let x = order_id(&body);
    let tag = seckill::keys::shard_tag(v, 0, 1).to_string();
    assert_eq!(
        state.recovery.histories.shard(&tag).logged(),
        0,
        "X's order left in the shard's log of a closed sale"
    );
    let relay = serve(&ns, &redis, true, &[]).await;
    settled(&a, v, x, &[order_id(&warm)]).await;
    drop((relay, w));
}
