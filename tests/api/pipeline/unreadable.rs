//! pipeline: `an_outbox_entry_the_relay_cannot_read_is_never_acknowledged`,
//! `a_repair_does_not_count_an_outbox_it_cannot_read`,
//! `a_claim_reaches_a_dead_relays_entry_behind_parked_ones`.
//!
//! An outbox entry this binary cannot read (a newer format written during a
//! rolling upgrade; here a synthetic one) may hold orders shoppers were told were
//! accepted: it is never acknowledged or dropped unread, and never left out of a
//! repair's count.
use super::*;

/// A sale's outbox with an entry of a format no relay of this binary reads
/// between orders it does read: the relay publishes the readable orders, leaves
/// the unreadable entry in the outbox, pending (parked, claimable by any relay
/// after the claim timeout), counts one incident for it however often it meets it,
/// and goes on publishing what comes after.
#[tokio::test]
async fn an_outbox_entry_the_relay_cannot_read_is_never_acknowledged() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns)
        .api_only()
        .forces_incidents(&["unreadable_outbox_entry"])
        .spawn()
        .await;
    let v = app.flash_sale(10).await;
    let outbox = ns.keys().outbox(v);
    let mut conn = app.redis().await;
    for u in 1..=2 {
        assert_eq!(app.order(v, u).await.0, StatusCode::ACCEPTED);
    }
    let future: String = redis::cmd("XADD")
        .arg(&outbox)
        .arg("*")
        .arg("v")
        .arg(v)
        .arg("z")
        .arg("orders in a format of a later version")
        .query_async(&mut conn)
        .await
        .unwrap();
    for u in 3..=4 {
        assert_eq!(app.order(v, u).await.0, StatusCode::ACCEPTED);
    }
    let state = app.app().state();
    let relay = relay(&app, "relay-of-an-older-version");
    let (broker, ch) = state.handles.broker.open().await.unwrap();
    ch.confirm_select(Default::default()).await.unwrap();
    let incidents = "seckill_worker_incidents_total{kind=\"unreadable_outbox_entry\"}";
    let published = relay
        .step(&ch, seckill::ordering::outbox::relay::Read::New)
        .await
        .unwrap();
    assert_eq!(published, 4, "the four readable orders were published");
    let left = |mut conn: seckill::redis_conn::Conn| {
        let outbox = outbox.clone();
        async move {
            let r: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
                .arg(&outbox)
                .arg("-")
                .arg("+")
                .query_async(&mut conn)
                .await
                .unwrap();
            r.ids.into_iter().map(|e| e.id).collect::<Vec<String>>()
        }
    };
    assert_eq!(
        left(conn.clone()).await,
        vec![future.clone()],
        "only the unreadable entry is left"
    );
    // Pending, held by the parked consumer, not by the relay that read it.
    let pending: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg(&outbox)
        .arg(seckill::keys::RELAY_GROUP)
        .arg("-")
        .arg("+")
        .arg(10)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(
        (&pending[0].0, pending[0].1.as_str()),
        (&future, seckill::ordering::outbox::relay::PARKED)
    );
    assert_eq!(app.metric(incidents).await, 1.0, "one incident");
    // Its own pending entries, then new ones: still never acknowledged, counted once,
    // and what comes after still flows.
    for u in 5..=6 {
        assert_eq!(app.order(v, u).await.0, StatusCode::ACCEPTED);
    }
    let again = relay
        .step(&ch, seckill::ordering::outbox::relay::Read::OwnPending)
        .await
        .unwrap()
        + relay
            .step(&ch, seckill::ordering::outbox::relay::Read::New)
            .await
            .unwrap();
    assert_eq!(again, 2, "the later orders were published");
    assert_eq!(
        left(conn.clone()).await,
        vec![future.clone()],
        "the unreadable entry is still there"
    );
    // Any relay's claim takes it: one that reads it would publish it.
    let claimed: redis::Value = redis::cmd("XAUTOCLAIM")
        .arg(&outbox)
        .arg(seckill::keys::RELAY_GROUP)
        .arg("relay-of-a-later-version")
        .arg(0)
        .arg("0-0")
        .arg("JUSTID")
        .query_async(&mut conn)
        .await
        .unwrap();
    let claimed = format!("{claimed:?}");
    assert!(claimed.contains(&future), "claimable: {claimed}");
    assert_eq!(app.metric(incidents).await, 1.0, "counted once");
    broker.close(200, "done".into()).await.unwrap();
    app.shutdown().await;
}

/// A repair counts the orders in flight from the outboxes: an entry of a newer
/// format fails the count (the repair is tried again, the sale stays closed, until
/// a process that reads it repairs) rather than rebuild the sale without its
/// orders, whose units would be sold again; an entry that is no entry at all is
/// set apart, to be quarantined.
#[tokio::test]
async fn a_repair_does_not_count_an_outbox_it_cannot_read() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns).api_only().spawn().await;
    let v = app.flash_sale(10).await;
    let outbox = ns.keys().outbox(v);
    let mut conn = app.redis().await;
    assert_eq!(app.order(v, 1).await.0, StatusCode::ACCEPTED);
    let read = seckill::ordering::outbox::read_outbox(&mut conn, &outbox, seckill::ordering::outbox::format::NEWEST)
        .await
        .unwrap();
    assert_eq!(read.orders.len(), 1, "the order in flight");
    let _: String = redis::cmd("XADD")
        .arg(&outbox)
        .arg("*")
        .arg("v")
        .arg(v)
        .arg("z")
        .arg("not an entry")
        .query_async(&mut conn)
        .await
        .unwrap();
    let read = seckill::ordering::outbox::read_outbox(&mut conn, &outbox, seckill::ordering::outbox::format::NEWEST)
        .await
        .unwrap();
    assert_eq!(
        (read.orders.len(), read.corrupt.len()),
        (1, 1),
        "counted, and set apart"
    );
    let _: String = redis::cmd("XADD")
        .arg(&outbox)
        .arg("*")
        .arg("v")
        .arg(v)
        .arg("z")
        .arg("orders in a format of a later version")
        .arg("f")
        .arg(99)
        .query_async(&mut conn)
        .await
        .unwrap();
    let err = seckill::ordering::outbox::read_outbox(&mut conn, &outbox, seckill::ordering::outbox::format::NEWEST)
        .await
        .expect_err("an outbox with an entry of a newer format is not counted");
    assert!(format!("{err:#}").contains("newer than this binary reads"), "{err:#}");
    app.shutdown().await;
}

/// Entries parked just now (pending, not idle) at the head of an outbox's pending
/// list, more than one `XAUTOCLAIM` call looks at (ten times its `COUNT`, the
/// relay's batch): a claim still reaches the entry a dead relay left behind them.
#[tokio::test]
async fn a_claim_reaches_a_dead_relays_entry_behind_parked_ones() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns)
        .api_only()
        .env("SECKILL_RELAY_BATCH", "2")
        .env("SECKILL_RELAY_CLAIM_IDLE_MS", "100")
        .spawn()
        .await;
    let v = app.flash_sale(10).await;
    let outbox = ns.keys().outbox(v);
    let mut conn = app.redis().await;
    let group = seckill::keys::RELAY_GROUP;
    let mut parked = Vec::new();
    for i in 0..50 {
        let id: String = redis::cmd("XADD")
            .arg(&outbox)
            .arg("*")
            .arg("z")
            .arg(i)
            .query_async(&mut conn)
            .await
            .unwrap();
        parked.push(id);
    }
    // An order behind them, read by a relay that then died.
    assert_eq!(app.order(v, 1).await.0, StatusCode::ACCEPTED);
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(group)
        .arg("dead-relay")
        .arg("STREAMS")
        .arg(&outbox)
        .arg(">")
        .query_async(&mut conn)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The unreadable ones handed back to the parked consumer just now: not idle.
    let _: redis::Value = redis::cmd("XCLAIM")
        .arg(&outbox)
        .arg(group)
        .arg(seckill::ordering::outbox::relay::PARKED)
        .arg(0)
        .arg(&parked)
        .arg("JUSTID")
        .query_async(&mut conn)
        .await
        .unwrap();
    let relay = relay(&app, "relay-alive");
    assert_eq!(
        relay.claim().await.unwrap(),
        1,
        "the dead relay's entry, behind 50 parked ones"
    );
    let pending: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg(&outbox)
        .arg(group)
        .arg("-")
        .arg("+")
        .arg(100)
        .arg("relay-alive")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert!(!parked.contains(&pending[0].0));
    app.shutdown().await;
}
