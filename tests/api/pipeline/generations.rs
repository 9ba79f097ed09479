//! pipeline: `an_intent_is_refused_once_a_repair_took_the_next_generation`,
//! `orders_a_relay_reads_after_a_repair_counted_them_are_published_once`,
//! `a_late_admission_counts_an_order_once_or_refuses_it`,
//! `an_order_only_in_an_intent_is_published_again_by_the_repair`,
//! `orders_a_relay_read_before_redis_lost_them_are_counted_late_or_failed_never_sold_twice`.
//!
//! A repair counts the orders in the outboxes and in the relays' intents when it
//! reads them. A relay that read orders before a repair records their intent only
//! while their sale is still at the generation they were read in; otherwise it
//! settles each itself (`src/ordering/outbox/relay/read_before_repair.rs`).
use super::*;

/// The intent statement refuses orders of a generation older than their sale's,
/// and records those of its generation.
#[tokio::test]
async fn an_intent_is_refused_once_a_repair_took_the_next_generation() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns).api_only().spawn().await;
    let v = app.flash_sale(10).await;
    sqlx::query("INSERT INTO sale_states (namespace, voucher_id, gen) VALUES ($1, $2, 3)")
        .bind(&ns.name)
        .bind(v)
        .execute(app.pg())
        .await
        .unwrap();
    let order = |epoch: i64| OrderMsg {
        id: seckill::id::OrderId::new(100 + epoch),
        user_id: seckill::id::UserId::new(7),
        voucher_id: seckill::id::VoucherId::new(v),
        created_ms: 1,
        epoch,
    };
    let intent = seckill::ordering::outbox::relay::intent::record;
    let points = [("v1".to_owned(), seckill::recovery::Point::count(3i64 << 32))];
    let refused = intent(app.pg(), &ns.name, &[order(2)], &points, "test", false)
        .await
        .unwrap();
    assert_eq!(refused, None, "read before the repair of generation 3");
    let (intents, point): (i64, Option<i64>) =
        sqlx::query_as("SELECT (SELECT count(*) FROM relay_intents), (SELECT seq FROM shard_points WHERE tag = 'v1')")
            .fetch_one(app.pg())
            .await
            .unwrap();
    assert_eq!((intents, point), (0, None), "nothing recorded, points included");
    let recorded = intent(app.pg(), &ns.name, &[order(3)], &points, "test", false)
        .await
        .unwrap();
    assert!(recorded.is_some(), "of the sale's generation");
}

/// Orders admitted, then their sale repaired before any relay read them (their
/// entries still in the outbox: the repair counted them). A relay reads them as of
/// the older generation: their entries are still there, so it publishes them as of
/// the new one, and each is stored once; the sale's books balance (their units
/// counted once, by the repair).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_a_relay_reads_after_a_repair_counted_them_are_published_once() {
    let ns = Namespace::new().await;
    // No relay and no worker here: the outbox keeps what is admitted.
    let app = TestApp::builder(&ns).api_only().spawn().await;
    let v = app.flash_sale(10).await;
    for u in 1..=3 {
        assert_eq!(app.order(v, u).await.0, StatusCode::ACCEPTED);
    }
    // A shard found without its stock: the sale is repaired (generation 1).
    let mut conn = app.redis().await;
    let _: () = redis::cmd("DEL")
        .arg(ns.keys().stock(v))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(app.order(v, 4).await.0, StatusCode::SERVICE_UNAVAILABLE);
    repaired_after(&app, v, 0).await;
    let r = relay(&app, "relay-after-a-repair");
    let (c, ch) = app.app().state().handles.broker.open().await.unwrap();
    ch.confirm_select(Default::default()).await.unwrap();
    let published = r.step(&ch, seckill::ordering::outbox::relay::Read::New).await.unwrap();
    assert_eq!(published, 3, "the three orders, published as of the new generation");
    c.close(200, "done".into()).await.unwrap();
    let worker = TestApp::builder(&ns).mode(Mode::Worker).spawn().await;
    wait_stored(&app, v, 3, Duration::from_secs(30), "the orders read after the repair").await;
    for u in 1..=3 {
        let (_, body) = app.order(v, u).await;
        assert_eq!(body["error"]["code"], "already_ordered", "shopper {u}");
    }
    let answers = wave(&app, v, 10..30).await;
    assert_eq!(accepted(&answers).len(), 7, "exactly the rest of the stock");
    // The relay of this test only: run rounds until the rest is out.
    let (c, ch) = app.app().state().handles.broker.open().await.unwrap();
    ch.confirm_select(Default::default()).await.unwrap();
    let mut sent = 0;
    for _ in 0..20 {
        sent += r.step(&ch, seckill::ordering::outbox::relay::Read::New).await.unwrap();
        if sent >= 7 {
            break;
        }
    }
    c.close(200, "done".into()).await.unwrap();
    wait_stored(&app, v, 10, Duration::from_secs(30), "the whole stock").await;
    assert_balanced(&app, v).await;
    worker.shutdown().await;
}

fn late_admit() -> redis::Script {
    redis::Script::new(seckill::shard_script!("late_admit"))
}

/// `late_admit.lua` on shard 0 of `v`: (user, order id); its answer.
async fn admit_late(
    conn: &mut seckill::redis_conn::Conn,
    keys: &seckill::keys::Keys,
    v: i64,
    user: i64,
    id: i64,
) -> i64 {
    let (code, _): (i64, i64) = late_admit()
        .key(keys.stock(v))
        .key(keys.buyers(v))
        .key(keys.admitted(v))
        .key(keys.returned(v))
        .key(keys.outbox(v))
        .key(keys.seq_at(v, 0, 1))
        .key(keys.hist_at(v, 0, 1))
        .arg(v)
        .arg(user)
        .arg(id)
        .arg(1_700_000_000_000i64)
        .arg("0")
        .arg([0u8; 8].as_slice())
        .arg(seckill::recovery::history::fresh_name().as_slice())
        .invoke_async(conn)
        .await
        .unwrap();
    code
}

/// A late admission counts an order once and puts it back into the outbox: sent
/// twice, the second finds the shopper's mark naming it and takes nothing. An
/// order whose unit came back (returned) is not taken again. A shopper whose mark
/// names another order, or a sale with no unit left, is refused; a sale not loaded
/// says so.
#[tokio::test]
async fn a_late_admission_counts_an_order_once_or_refuses_it() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns).api_only().spawn().await;
    let v = app.flash_sale(3).await;
    let keys = ns.keys();
    let mut conn = app.redis().await;
    let books = |conn: &mut seckill::redis_conn::Conn| {
        let mut conn = conn.clone();
        let (stock, outbox) = (keys.stock(v), keys.outbox(v));
        async move {
            let b: (i64, i64) = redis::pipe()
                .get(stock)
                .cmd("XLEN")
                .arg(outbox)
                .query_async(&mut conn)
                .await
                .unwrap();
            b
        }
    };
    assert_eq!(admit_late(&mut conn, &keys, v, 1, 501).await, 1);
    assert_eq!(books(&mut conn).await, (2, 1), "a unit taken, an entry written");
    assert_eq!(admit_late(&mut conn, &keys, v, 1, 501).await, 2, "already counted");
    assert_eq!(books(&mut conn).await, (2, 1), "once");
    assert_eq!(
        admit_late(&mut conn, &keys, v, 1, 502).await,
        0,
        "the shopper holds another"
    );
    let _: () = redis::cmd("SADD")
        .arg(keys.returned(v))
        .arg(601)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        admit_late(&mut conn, &keys, v, 2, 601).await,
        2,
        "returned: not taken again"
    );
    assert_eq!(admit_late(&mut conn, &keys, v, 2, 602).await, 1);
    assert_eq!(admit_late(&mut conn, &keys, v, 3, 701).await, 1);
    assert_eq!(admit_late(&mut conn, &keys, v, 4, 801).await, 0, "no unit left");
    let _: () = redis::cmd("DEL")
        .arg(keys.stock(v))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(admit_late(&mut conn, &keys, v, 5, 901).await, -1, "not loaded");
}

/// An order in a relay's intent and nowhere else (its outbox entry gone with Redis
/// going back in time, its message never confirmed or lost by the broker: here a
/// hand-made intent): the repair counts it and writes it back into its outbox, the
/// relay publishes it again, and it is stored, its shopper's unit taken once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_only_in_an_intent_is_published_again_by_the_repair() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(10).await;
    let id = 9_001i64;
    sqlx::query(
        "INSERT INTO relay_intents (namespace, epoch, voucher_ids, order_ids, user_ids, created_ms)
         VALUES ($1, 0, $2, $3, $4, $5)",
    )
    .bind(&ns.name)
    .bind(vec![v])
    .bind(vec![id])
    .bind(vec![77i64])
    .bind(vec![chrono::Utc::now().timestamp_millis()])
    .execute(app.pg())
    .await
    .unwrap();
    let mut conn = app.redis().await;
    let _: () = redis::cmd("DEL")
        .arg(ns.keys().stock(v))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(app.order(v, 1).await.0, StatusCode::SERVICE_UNAVAILABLE);
    repaired_after(&app, v, 0).await;
    let (_, body) = app.order(v, 77).await;
    assert_eq!(body["error"]["code"], "already_ordered", "{body}");
    assert_eq!(body["error"]["order_id"], id.to_string(), "{body}");
    wait_stored(&app, v, 1, Duration::from_secs(30), "the order of the intent").await;
    let (stored_id, user, status): (i64, i64, String) =
        sqlx::query_as("SELECT id, user_id, status FROM voucher_orders WHERE voucher_id = $1")
            .bind(v)
            .fetch_one(app.pg())
            .await
            .unwrap();
    assert_eq!((stored_id, user, status.as_str()), (id, 77, "created"));
    let answers = wave(&app, v, 100..120).await;
    assert_eq!(accepted(&answers).len(), 9, "the rest of the stock, once");
    wait_stored(&app, v, 10, Duration::from_secs(30), "the whole stock").await;
    assert_balanced(&app, v).await;
}

/// Orders a relay read and had not recorded yet when Redis went back in time to
/// before them (their entries, marks and units gone, so the repair counts none of
/// them): the relay settles each against the repaired sale. An order whose unit and
/// shopper are still free is counted late, written back into its outbox and stored
/// once under its own id; one whose shopper or unit was sold again meanwhile is
/// stored `failed` and counted as an incident. No unit is sold twice, no shopper
/// holds two live orders, and no acknowledged order is left without a trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_a_relay_read_before_redis_lost_them_are_counted_late_or_failed_never_sold_twice() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns)
        .api_only()
        .forces_incidents(&["late_conflict"])
        .spawn()
        .await;
    let v = app.flash_sale(6).await;
    // The four orders through a process that stops before the loss: nobody holds
    // them in memory (a process that does hands them to the repair itself,
    // `rollback::named`), only the relay's read below.
    let placer = TestApp::builder(&ns).api_only().spawn().await;
    for u in 1..=4 {
        assert_eq!(placer.order(v, u).await.0, StatusCode::ACCEPTED, "shopper {u}");
    }
    placer.shutdown().await;
    // The relay's read: the four orders, as `step` reads them.
    let keys = ns.keys();
    let outbox = keys.outbox(v);
    let tag = keys.tag_of(&outbox).unwrap().to_owned();
    let mut conn = app.redis().await;
    let entries: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(&outbox)
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut read = Vec::new();
    let mut top = seckill::recovery::Point::count(0);
    for e in &entries.ids {
        let parsed = seckill::ordering::outbox::entry::parse(e, seckill::ordering::outbox::format::NEWEST)
            .expect("an entry reserve.lua wrote");
        let p = parsed.point().expect("entries carry their sequence");
        if p.seq > top.seq {
            top = p;
        }
        for o in parsed.orders {
            let origin = seckill::ordering::outbox::relay::Origin {
                tag: tag.clone(),
                entry: Some((outbox.clone(), e.id.clone())),
            };
            read.push((o, origin));
        }
    }
    read.sort_by_key(|(o, _)| o.user_id);
    assert_eq!(read.len(), 4);
    let lost: HashMap<i64, i64> = read.iter().map(|(o, _)| (o.user_id.get(), o.id.get())).collect();
    // Redis back to before the four orders: their entries, marks and units gone.
    for key in [outbox.clone(), keys.buyers(v), keys.admitted(v), keys.stock(v)] {
        let _: () = redis::cmd("DEL").arg(key).query_async(&mut conn).await.unwrap();
    }
    assert_eq!(app.order(v, 50).await.0, StatusCode::SERVICE_UNAVAILABLE);
    repaired_after(&app, v, 0).await;
    // Meanwhile the repaired sale sells again: shopper 3 a second time (its first
    // order is not in Redis any more), and three others: 2 units left.
    for u in [3, 100, 101, 102] {
        assert_eq!(
            app.order(v, u).await.0,
            StatusCode::ACCEPTED,
            "shopper {u} after the repair"
        );
    }
    let r = relay(&app, "relay-that-read-before-the-loss");
    let (c, ch) = app.app().state().handles.broker.open().await.unwrap();
    ch.confirm_select(Default::default()).await.unwrap();
    let published = r
        .publish_read(&mut conn, &ch, read, &[(tag.clone(), top)])
        .await
        .unwrap();
    assert_eq!(
        published,
        Some(0),
        "nothing of an older generation is published as it was read"
    );
    // Shoppers 1 and 2 were counted late (the last two units); 3 (sold again) and 4
    // (no unit left) cannot be honoured.
    let mut sent = 0;
    for _ in 0..20 {
        sent += r.step(&ch, seckill::ordering::outbox::relay::Read::New).await.unwrap();
        if sent >= 6 {
            break;
        }
    }
    c.close(200, "done".into()).await.unwrap();
    assert_eq!(sent, 6, "four orders taken after the repair and the two counted late");
    let worker = TestApp::builder(&ns).mode(Mode::Worker).spawn().await;
    wait_stored(&app, v, 8, Duration::from_secs(30), "six live orders and two failed").await;
    let rows: Vec<(i64, i64, String)> =
        sqlx::query_as("SELECT id, user_id, status FROM voucher_orders WHERE voucher_id = $1")
            .bind(v)
            .fetch_all(app.pg())
            .await
            .unwrap();
    let status_of = |id: i64| rows.iter().find(|r| r.0 == id).map(|r| r.2.clone());
    assert_eq!(status_of(lost[&1]).as_deref(), Some("created"), "{rows:?}");
    assert_eq!(status_of(lost[&2]).as_deref(), Some("created"), "{rows:?}");
    assert_eq!(status_of(lost[&3]).as_deref(), Some("failed"), "{rows:?}");
    assert_eq!(status_of(lost[&4]).as_deref(), Some("failed"), "{rows:?}");
    let live: Vec<i64> = rows.iter().filter(|r| r.2 != "failed").map(|r| r.1).collect();
    // (One live order per shopper: a unique index; the two sold again are the
    // `failed` ones above.)
    assert_eq!(live.len(), 6, "exactly the stock: {rows:?}");
    let metrics = app.metrics_text();
    assert!(
        metrics.contains("seckill_worker_incidents_total{kind=\"late_conflict\"} 2"),
        "two late conflicts counted"
    );
    assert_eq!(app.order(v, 1).await.1["error"]["code"], "already_ordered");
    // The audit shows the two failures, and nothing else out of place.
    let (_, audit) = app
        .get(&format!("/api/v1/admin/vouchers/{v}/audit"), Some(&app.admin()))
        .await;
    let checks = &audit["checks"];
    assert_eq!(checks["no_failed_orders"], false, "{audit:#}");
    for check in [
        "units_accounted_for",
        "orders_known_to_redis",
        "postgres_stock",
        "no_returns_pending",
    ] {
        assert_eq!(checks[check], true, "{check}: {audit:#}");
    }
    assert_eq!(audit["in_flight"]["orders"], 0, "{audit:#}");
    worker.shutdown().await;
}
