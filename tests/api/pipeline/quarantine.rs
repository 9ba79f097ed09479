//! pipeline: `a_corrupt_outbox_entry_is_quarantined_and_the_sale_reopens_without_overselling`,
//! `a_repair_meeting_an_entry_of_a_newer_format_waits_closed_with_an_alarm`,
//! `a_batch_whose_conflicts_do_not_settle_is_dead_lettered_never_acknowledged`.
//!
//! What a repair and the worker do with what they cannot settle: an outbox entry
//! that is no entry is moved aside and its units kept off sale; one of a newer
//! format keeps the sale closed (a newer process reads it); a batch with an order
//! that gets no status is kept in `dead_letters` with an incident.
use super::*;

/// Deletes the sale's stock key (Redis lost it) and returns its repairs so far.
async fn lose_stock(app: &TestApp, ns: &Namespace, v: i64) -> i32 {
    let before = repairs_of(app, v).await;
    let mut conn = app.redis().await;
    let gone: i64 = redis::cmd("DEL")
        .arg(ns.keys().stock_at(v, 0, 1))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(gone, 1, "the stock key was there");
    before
}

/// A corrupt entry (not written by any script) in the outbox when the sale is
/// repaired: the repair moves it to the shard's quarantine with the most orders it
/// may hold, counts them as sold, and reopens the sale; the crowd after it buys the
/// rest and no more (the quarantined units are not sold again).
#[tokio::test]
async fn a_corrupt_outbox_entry_is_quarantined_and_the_sale_reopens_without_overselling() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns)
        .forces_incidents(&["quarantined_outbox_entry", "unreadable_outbox_entry"])
        .spawn()
        .await;
    let stock = 20;
    let v = app.flash_sale(stock).await;
    for u in 1..=3 {
        assert_eq!(app.order(v, u).await.0, StatusCode::ACCEPTED);
    }
    wait_persisted(&app, v, 3).await;
    let mut conn = app.redis().await;
    let outbox = ns.keys().outbox(v);
    // 24 bytes of fields: at most four orders ("i,u,t," each takes six bytes).
    let corrupt: String = redis::cmd("XADD")
        .arg(&outbox)
        .arg("*")
        .arg("z")
        .arg("not an entry at all, no")
        .query_async(&mut conn)
        .await
        .unwrap();
    let before = lose_stock(&app, &ns, v).await;
    let (s, _) = app.order(v, 4).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "the lost sale closes");
    repaired_after(&app, v, before).await;
    let quarantined: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(ns.keys().quarantine_at(v, 0, 1))
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(quarantined.ids.len(), 1, "one entry quarantined");
    let q = &quarantined.ids[0];
    assert_eq!(q.get::<String>("from").as_deref(), Some(corrupt.as_str()));
    let bound: i64 = q.get("bound").expect("the bound it holds back");
    assert_eq!(bound, 4);
    let left: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(&outbox)
        .arg(&corrupt)
        .arg(&corrupt)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(left.ids.is_empty(), "the entry left the outbox");
    assert!(
        app.metric("seckill_worker_incidents_total{kind=\"quarantined_outbox_entry\"}")
            .await
            >= 1.0
    );
    // The sale sells again, exactly the stock less the sold and the held back.
    let mut sold = 3;
    for u in 4..=40 {
        let (s, b) = app.order(v, u).await;
        match s {
            StatusCode::ACCEPTED => sold += 1,
            StatusCode::CONFLICT => assert_eq!(code(&b), "sold_out", "{b}"),
            other => panic!("shopper {u}: {other} {b}"),
        }
    }
    assert_eq!(sold, stock - bound, "sold {sold} of {stock}, {bound} held back");
    wait_persisted(&app, v, sold).await;
    app.shutdown().await;
}

/// An entry of a format newer than this binary reads in the outbox when the sale
/// must be repaired: the repair does not rebuild the sale without it (its orders'
/// units would be sold again); the sale stays closed (503, `seckill_redis_repairing`
/// above 0, the relay's `unreadable_outbox_entry` incident) until the entry is
/// gone (here taken away as a newer process's relay would once it published it),
/// then it is repaired and sells.
#[tokio::test]
async fn a_repair_meeting_an_entry_of_a_newer_format_waits_closed_with_an_alarm() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns)
        .forces_incidents(&["unreadable_outbox_entry"])
        .spawn()
        .await;
    let v = app.flash_sale(10).await;
    for u in 1..=2 {
        assert_eq!(app.order(v, u).await.0, StatusCode::ACCEPTED);
    }
    wait_persisted(&app, v, 2).await;
    let mut conn = app.redis().await;
    let outbox = ns.keys().outbox(v);
    let newer: String = redis::cmd("XADD")
        .arg(&outbox)
        .arg("*")
        .arg("v")
        .arg(v)
        .arg("f")
        .arg(99)
        .arg("z")
        .arg("orders in a format of a later version")
        .query_async(&mut conn)
        .await
        .unwrap();
    let alarm = "seckill_worker_incidents_total{kind=\"unreadable_outbox_entry\"}";
    eventually(Duration::from_secs(20), || async {
        (app.metric(alarm).await >= 1.0).then_some(())
    })
    .await
    .expect("the relay's alarm for the entry it cannot read");
    let before = lose_stock(&app, &ns, v).await;
    assert_eq!(app.order(v, 3).await.0, StatusCode::SERVICE_UNAVAILABLE);
    // Several repair rounds (one a second) later, still closed, not repaired.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (s, b) = app.order(v, 3).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{b}");
    assert_eq!(
        repairs_of(&app, v).await,
        before,
        "no repair without the newer entry's orders"
    );
    assert!(
        app.metric("seckill_redis_repairing").await >= 1.0,
        "the closure is shown"
    );
    let _: redis::Value = redis::pipe()
        .atomic()
        .cmd("XACK")
        .arg(&outbox)
        .arg(seckill::keys::RELAY_GROUP)
        .arg(&newer)
        .cmd("XDEL")
        .arg(&outbox)
        .arg(&newer)
        .query_async(&mut conn)
        .await
        .unwrap();
    repaired_after(&app, v, before).await;
    let (s, b) = selling_again(&app, v, 3).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    wait_persisted(&app, v, 3).await;
    app.shutdown().await;
}

/// Postgres silently skips one shopper's rows (a `BEFORE INSERT` trigger returning
/// NULL: no row, no conflict): the worker's conflict settling finds no status for
/// that order after its rounds; the message is kept in `dead_letters` with an
/// `unsettled_conflicts` incident and never stored as if settled; the other
/// shoppers' orders are stored.
#[tokio::test]
async fn a_batch_whose_conflicts_do_not_settle_is_dead_lettered_never_acknowledged() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns)
        .forces_incidents(&["unsettled_conflicts"])
        .spawn()
        .await;
    let v = app.flash_sale(10).await;
    let skipped_user = 7_000_003;
    sqlx::raw_sql(&format!(
        "CREATE FUNCTION skip_one_shopper() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN IF NEW.user_id = {skipped_user} THEN RETURN NULL; END IF; RETURN NEW; END $$; \
         CREATE TRIGGER skip_one_shopper BEFORE INSERT ON voucher_orders \
         FOR EACH ROW EXECUTE FUNCTION skip_one_shopper();"
    ))
    .execute(app.pg())
    .await
    .unwrap();
    let mut ids = HashMap::new();
    for u in 7_000_001..=7_000_005 {
        let (s, b) = app.order(v, u).await;
        assert_eq!(s, StatusCode::ACCEPTED, "{b}");
        ids.insert(u, b["order_id"].as_str().unwrap().to_owned());
    }
    let letter: Vec<u8> = eventually(Duration::from_secs(30), || async {
        sqlx::query_scalar("SELECT body FROM dead_letters WHERE reason LIKE '%did not settle%'")
            .fetch_optional(app.pg())
            .await
            .unwrap()
    })
    .await
    .expect("the unsettled message kept in dead_letters");
    let letter = String::from_utf8_lossy(&letter).into_owned();
    assert!(
        letter.contains(&ids[&skipped_user]),
        "the letter holds the skipped order: {letter}"
    );
    // Counted once the letter is stored (a moment after it is visible).
    let counted = eventually(Duration::from_secs(10), || async {
        let n = app
            .metric("seckill_worker_incidents_total{kind=\"unsettled_conflicts\"}")
            .await;
        (n >= 1.0).then_some(n)
    })
    .await;
    assert_eq!(counted, Some(1.0), "one unsettled_conflicts incident");
    // Every other order is stored, unless it shared the skipped one's message (then
    // the letter holds it too); the skipped one is not stored at all.
    let stored: Vec<i64> = eventually(Duration::from_secs(20), || async {
        let stored: Vec<i64> =
            sqlx::query_scalar("SELECT id FROM voucher_orders WHERE voucher_id = $1 AND status = 'created'")
                .bind(v)
                .fetch_all(app.pg())
                .await
                .unwrap();
        let all_there = ids
            .iter()
            .filter(|(u, _)| **u != skipped_user)
            .all(|(_, id)| letter.contains(id.as_str()) || stored.contains(&id.parse().unwrap()));
        all_there.then_some(stored)
    })
    .await
    .expect("every order outside the letter stored");
    assert!(!stored.contains(&ids[&skipped_user].parse().unwrap()));
    app.shutdown().await;
}
