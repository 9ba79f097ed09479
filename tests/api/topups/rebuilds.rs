//! topups: `a_sale_rebuilt_from_postgres_counts_a_pending_top_up_once`,
//! `a_top_up_adds_nothing_to_a_sale_a_repair_under_way_has_rebuilt`.
use super::*;

/// A top-up is pending (committed in Postgres, not in Redis) when Redis loses the
/// sale. The Redis half refuses (no stock key: never sell from nothing), the repair
/// rebuilds the stock from Postgres, which counts the top-up, and marks it done:
/// the recovery pass must not add it a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_rebuilt_from_postgres_counts_a_pending_top_up_once() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(2).await;
    let st = app.app().state();
    let mut tx = st.pg.begin().await.unwrap();
    let t = topup::record(&mut tx, v, 3).await.unwrap().unwrap();
    tx.commit().await.unwrap();

    let mut conn = app.redis().await;
    let () = redis::cmd("DEL")
        .arg(ns.keys().stock(v))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        !topup::apply(&st.pg, &st.redis, &st.keys, t.id).await.unwrap(),
        "no stock key: the top-up stays pending"
    );
    eventually(Duration::from_secs(30), || async {
        let done: bool = sqlx::query_scalar("SELECT done_at IS NOT NULL FROM stock_topups WHERE id = $1")
            .bind(t.id)
            .fetch_one(&st.pg)
            .await
            .unwrap();
        done.then_some(())
    })
    .await
    .expect("the top-up is done (by the repair)");
    assert_eq!(redis_stock(&app, &ns, v).await, Some(5), "2 + 3, rebuilt from Postgres");
    assert_eq!(st.lifecycle.recover_topups(Duration::ZERO).await.unwrap(), 0);
    assert!(topup::apply(&st.pg, &st.redis, &st.keys, t.id).await.unwrap());
    assert_eq!(redis_stock(&app, &ns, v).await, Some(5), "not added again");

    current_epoch(&app).await; // selling again
    let accepted = sell(&app, v, 1..9).await;
    let (created, failed) = persisted(&st.pg, v, accepted).await;
    assert_eq!((accepted, created, failed), (5, 5, 0));
    app.shutdown().await;
}

/// A repair under way (newer than the epoch Postgres has committed) has rebuilt the
/// sale from Postgres, which counts the pending top-up: adding it to the rebuilt
/// stock would add it twice. The Redis half leaves it pending (the repair marks it
/// done when it commits); with no repair under way it goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_top_up_adds_nothing_to_a_sale_a_repair_under_way_has_rebuilt() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(2).await;
    let st = app.app().state();
    let epoch = current_epoch(&app).await;
    let mut tx = st.pg.begin().await.unwrap();
    let t = topup::record(&mut tx, v, 3).await.unwrap().unwrap();
    tx.commit().await.unwrap();

    let mut conn = app.redis().await;
    let fence = ns.keys().repair_fence(v);
    let before: Option<i64> = redis::cmd("GET").arg(&fence).query_async(&mut conn).await.unwrap();
    let () = redis::cmd("SET")
        .arg(&fence)
        .arg(epoch + 1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!topup::apply(&st.pg, &st.redis, &st.keys, t.id).await.unwrap());
    assert_eq!(redis_stock(&app, &ns, v).await, Some(2), "left to the repair");
    let mut restore = redis::cmd(if before.is_some() { "SET" } else { "DEL" });
    restore.arg(&fence);
    if let Some(b) = before {
        restore.arg(b);
    }
    let () = restore.query_async(&mut conn).await.unwrap();
    assert!(topup::apply(&st.pg, &st.redis, &st.keys, t.id).await.unwrap());
    assert_eq!(redis_stock(&app, &ns, v).await, Some(5));
    app.shutdown().await;
}
