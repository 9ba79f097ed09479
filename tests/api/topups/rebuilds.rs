//! topups: `a_sale_rebuilt_from_postgres_counts_a_pending_top_up_once`,
//! `a_top_up_committed_after_a_repair_is_added_once`.
use super::*;

/// A top-up is pending (committed in Postgres, not in Redis) when Redis loses the
/// sale. The Redis half refuses (no stock key: never sell from nothing) and asks
/// for the sale's repair, which rebuilds the stock from Postgres (counting the
/// top-up) and names the top-up in the shard's set of applied ones: applied again
/// afterwards it adds nothing, and is marked done.
#[tokio::test]
async fn a_sale_rebuilt_from_postgres_counts_a_pending_top_up_once() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(2).await;
    let st = app.app().state();
    let mut tx = st.handles.pg.begin().await.unwrap();
    let t = topup::record(&mut tx, v, 3).await.unwrap().unwrap();
    tx.commit().await.unwrap();

    let mut conn = app.redis().await;
    let () = redis::cmd("DEL")
        .arg(ns.keys().stock(v))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        !topup::apply(&st.handles.pg, &st.handles.redis, &st.handles.keys, &st.recovery, t.id)
            .await
            .unwrap(),
        "no stock key: the top-up stays pending"
    );
    repaired_after(&app, v, 0).await;
    assert_eq!(redis_stock(&app, &ns, v).await, Some(5), "2 + 3, rebuilt from Postgres");
    let pg = app.pg().clone();
    let done = |id: i64| {
        let pg = pg.clone();
        async move {
            sqlx::query_scalar::<_, bool>("SELECT done_at IS NOT NULL FROM stock_topups WHERE id = $1")
                .bind(id)
                .fetch_one(&pg)
                .await
                .unwrap()
        }
    };
    assert!(!done(t.id).await, "still pending: nothing applied it since");
    assert!(
        topup::apply(&st.handles.pg, &st.handles.redis, &st.handles.keys, &st.recovery, t.id)
            .await
            .unwrap()
    );
    assert_eq!(redis_stock(&app, &ns, v).await, Some(5), "not added again");
    assert!(done(t.id).await, "done: the repair had counted it");

    let accepted = sell(&app, v, 1..9).await;
    let (created, failed) = persisted(&st.handles.pg, v, accepted).await;
    assert_eq!((accepted, created, failed), (5, 5, 0));
    app.shutdown().await;
}

/// A top-up committed after a repair read the sale is not counted by it: it is
/// added once the sale is open again, once.
#[tokio::test]
async fn a_top_up_committed_after_a_repair_is_added_once() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(2).await;
    let st = app.app().state();
    let mut conn = app.redis().await;
    let () = redis::cmd("DEL")
        .arg(ns.keys().stock(v))
        .query_async(&mut conn)
        .await
        .unwrap();
    let (status, _) = app.order(v, 1).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    repaired_after(&app, v, 0).await;
    assert_eq!(redis_stock(&app, &ns, v).await, Some(2));
    let mut tx = st.handles.pg.begin().await.unwrap();
    let t = topup::record(&mut tx, v, 3).await.unwrap().unwrap();
    tx.commit().await.unwrap();
    assert!(
        topup::apply(&st.handles.pg, &st.handles.redis, &st.handles.keys, &st.recovery, t.id)
            .await
            .unwrap()
    );
    assert_eq!(redis_stock(&app, &ns, v).await, Some(5));
    assert!(
        topup::apply(&st.handles.pg, &st.handles.redis, &st.handles.keys, &st.recovery, t.id)
            .await
            .unwrap()
    );
    assert_eq!(redis_stock(&app, &ns, v).await, Some(5), "once");
    app.shutdown().await;
}
