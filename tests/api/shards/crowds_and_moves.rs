//! shards: `a_crowd_on_four_shards_sells_exactly_the_stock_once_per_shopper`,
//! `demand_on_one_shard_still_sells_the_whole_stock_through_moves`,
//! `a_move_interrupted_after_its_give_is_completed_by_the_recovery`,
//! `redis_losing_a_sharded_sale_rebuilds_every_shard_without_overselling`.
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crowd_on_four_shards_sells_exactly_the_stock_once_per_shopper() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let stock = 120;
    let v = app.sharded_sale(stock, 4).await;
    assert_eq!(shard_stocks(&app, v).await, vec![30, 30, 30, 30]);
    // 600 requests of 400 shoppers: the first 200 ask twice.
    let shoppers: Vec<i64> = (1..=400).chain(1..=200).collect();
    let answers = sell(&app, v, shoppers).await;
    println!("four shards: {:?}", answers.codes);
    assert_eq!(
        answers.accepted.len() as i64,
        stock,
        "exactly the stock: {:?}",
        answers.codes
    );
    let refused: usize = answers
        .codes
        .iter()
        .filter(|(c, _)| *c != "accepted")
        .map(|(_, n)| n)
        .sum();
    assert_eq!(refused, 600 - stock as usize);
    assert!(answers
        .codes
        .keys()
        .all(|c| ["accepted", "sold_out", "already_ordered"].contains(&c.as_str())));
    let tally = Tally {
        acknowledged: answers.accepted.values().copied().collect(),
        ..Default::default()
    };
    settle("four shards", &app, v, stock, &tally).await;
    let left = shard_stocks(&app, v).await;
    assert_eq!(left, vec![0, 0, 0, 0]);
    // Each order is where its shopper's shard says (found through /orders/mine).
    for (&u, &id) in answers.accepted.iter().take(20) {
        let (s, b) = app
            .get(&format!("/api/v1/vouchers/{v}/orders/mine"), Some(&app.shopper(u)))
            .await;
        assert_eq!(s, StatusCode::OK, "{b}");
        assert_eq!(b["order_id"], id.to_string());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn demand_on_one_shard_still_sells_the_whole_stock_through_moves() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let stock = 120;
    let v = app.sharded_sale(stock, 4).await;
    // Every shopper maps to shard 0, which holds 30 units of the 120.
    let mut on_zero = (1..).filter(|u| shard_of(*u, 4) == 0);
    let first: Vec<i64> = on_zero.by_ref().take(stock as usize).collect();
    let served = sell(&app, v, first).await;
    // As many shoppers as units: nobody may hear sold_out while another shard holds stock.
    assert_eq!(
        served.accepted.len() as i64,
        stock,
        "every shopper served: {:?}",
        served.codes
    );
    assert_eq!(shard_stocks(&app, v).await, vec![0, 0, 0, 0]);
    let late: Vec<i64> = on_zero.take(20).collect();
    let answers = sell(&app, v, late).await;
    assert_eq!(answers.codes.get("sold_out"), Some(&20), "{:?}", answers.codes);
    let other: Vec<i64> = (1..).filter(|u| shard_of(*u, 4) == 3).take(5).collect();
    let answers = sell(&app, v, other).await;
    assert_eq!(answers.codes.get("sold_out"), Some(&5), "{:?}", answers.codes);
    let acknowledged: HashSet<i64> = served.accepted.values().copied().collect();
    settle(
        "skewed onto one shard",
        &app,
        v,
        stock,
        &Tally {
            acknowledged,
            ..Default::default()
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_move_interrupted_after_its_give_is_completed_by_the_recovery() {
    let ns = Namespace::new().await;
    // An instance whose recovery pass is off: the move stays in transit.
    let app = TestApp::builder(&ns)
        .env("SECKILL_SHARD_RECOVERY_MS", "0")
        .spawn()
        .await;
    let stock = 40;
    let v = app.sharded_sale(stock, 4).await;
    let keys = ns.keys();
    let redis = app.app().state().handles.redis.clone();
    let recovery = &app.app().state().recovery;
    let mut conn = redis.conn().await.unwrap();
    // A process registers a move of 5 units from shard 1 to shard 0 (as every
    // mover does before its first step), gives them, then dies.
    let mv = shards::Move {
        voucher: v,
        shards: 4,
        from: 1,
        to: 0,
        transfer: "crashed-move",
    };
    seckill::sales::refill::register(&mut conn, &keys, &mv, 5)
        .await
        .unwrap();
    let (given, given_at, _) = shards::give(&mut conn, &keys, recovery, &mv, 5).await.unwrap();
    assert_eq!(given, 5);
    // Retried with the same id (a timeout): nothing more leaves the shard.
    let (again, _, _) = shards::give(&mut conn, &keys, recovery, &mv, 5).await.unwrap();
    assert_eq!(again, 5, "the same give, reported again");
    assert_eq!(shard_stocks(&app, v).await, vec![10, 5, 10, 10]);
    let a = audit(&app, v).await;
    assert_eq!(a["redis"]["units_in_transit"], 5, "{a:#}");
    assert_eq!(a["redis"]["stock_remaining"], 35, "{a:#}");
    assert_eq!(a["balanced"], true, "{a:#}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(audit(&app, v).await["redis"]["units_in_transit"], 5, "no recovery here");
    // Another instance, with the recovery pass on (every second), completes it.
    let other = TestApp::spawn(&ns).await;
    let started = std::time::Instant::now();
    let done = eventually(Duration::from_secs(5), || async {
        let a = audit(&app, v).await;
        (a["redis"]["units_in_transit"] == 0).then_some(a)
    })
    .await
    .expect("the move completed");
    println!(
        "move completed {:?} after the recovering instance started",
        started.elapsed()
    );
    assert_eq!(done["balanced"], true, "{done:#}");
    assert_eq!(shard_stocks(&app, v).await, vec![15, 5, 10, 10]);
    // Replays add and give nothing.
    let (retaken, _) = shards::take(&mut conn, &keys, recovery, &mv, 5, given_at)
        .await
        .unwrap();
    assert_eq!(retaken, 0);
    let (regiven, _, _) = shards::give(&mut conn, &keys, recovery, &mv, 5).await.unwrap();
    assert_eq!(regiven, 0);
    assert_eq!(shard_stocks(&app, v).await, vec![15, 5, 10, 10]);
    // The sale still sells exactly its stock.
    let answers = sell(&other, v, (1..=60).collect()).await;
    assert_eq!(answers.accepted.len() as i64, stock, "{:?}", answers.codes);
    let tally = Tally {
        acknowledged: answers.accepted.values().copied().collect(),
        ..Default::default()
    };
    // Either instance's worker may have persisted the orders.
    settle_on("move interrupted", &other, v, stock, &tally, &[&app.addr, &other.addr]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_losing_a_sharded_sale_rebuilds_every_shard_without_overselling() {
    let ns = Namespace::new().await;
    let app = Arc::new(TestApp::builder(&ns).forces_incidents(&["rescued_order"]).spawn().await);
    let stock = 150;
    let v = app.sharded_sale(stock, 4).await;
    let pattern = format!("{}:*", ns.name);
    let keys = ns.keys();
    let outboxes: Vec<String> = (0..4).map(|k| keys.outbox_at(v, k, 4)).collect();
    let destroyed = Arc::new(std::sync::Mutex::new(HashSet::new()));
    let before = repairs_of(&app, v).await;
    let (app_ref, pattern, outboxes, destroyed_ref) = (&app, &pattern, &outboxes, &destroyed);
    let tally = crowd(&app.addr, &app.jwt, app.pg(), v, 1..201, |landing| async move {
        let (app, destroyed) = (app_ref, destroyed_ref);
        // Every key of the deployment goes, slot by slot: each shard's keys in one
        // MULTI with a read of its outbox (the orders in it at that instant are lost
        // with it, acknowledged or not: that is what Redis durability is for).
        let mut redis = app.redis().await;
        let mut by_slot: HashMap<u16, Vec<String>> = HashMap::new();
        for k in all_keys(&redis_url(), pattern).await {
            by_slot.entry(seckill::keys::slot(k.as_bytes())).or_default().push(k);
        }
        landing.lands().await;
        for (slot, group) in by_slot {
            let outbox = outboxes.iter().find(|o| seckill::keys::slot(o.as_bytes()) == slot);
            match outbox {
                Some(outbox) => {
                    let (entries, _): (redis::streams::StreamRangeReply, i64) = redis::pipe()
                        .atomic()
                        .cmd("XRANGE")
                        .arg(outbox)
                        .arg("-")
                        .arg("+")
                        .cmd("DEL")
                        .arg(&group)
                        .query_async(&mut redis)
                        .await
                        .unwrap();
                    destroyed.lock().unwrap().extend(
                        entries
                            .ids
                            .iter()
                            .filter_map(|e| {
                                seckill::ordering::outbox::entry::parse(e, seckill::ordering::outbox::format::NEWEST)
                            })
                            .flat_map(|e| e.orders)
                            .map(|o| o.id.get()),
                    );
                }
                None => {
                    let mut rest = redis::pipe();
                    for k in &group {
                        rest.del(k).ignore();
                    }
                    let () = rest.query_async(&mut redis).await.unwrap();
                }
            }
        }
        // Refused, never sold from nothing.
        let (status, body) = app.order(v, 9_999).await;
        assert!(
            [
                (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
                (StatusCode::CONFLICT, "sold_out")
            ]
            .contains(&(status, code(&body))),
            "refused, not sold from nothing: {status} {body}"
        );
    })
    .await;
    let destroyed = destroyed.lock().unwrap().clone();
    println!(
        "sharded sale lost: {} orders were in the outboxes that went",
        destroyed.len()
    );
    // Acknowledged by this process, which still holds them: admitted again (each an
    // incident), every acknowledged order stored.
    let tally = Tally {
        acknowledged: tally.acknowledged.clone(),
        landed: tally.landed,
        ..Default::default()
    };
    // Every key went: a repair rebuilds the sale.
    repaired_after(&app, v, before).await;
    selling_again(&app, v, 9_998).await;
    // Every shard is back, and the shoppers admitted before the loss (whose orders
    // survived) are still known: none gets a second unit.
    for &known in tally.acknowledged.iter().take(10) {
        let user: i64 = eventually(Duration::from_secs(30), || async {
            sqlx::query_scalar("SELECT user_id FROM voucher_orders WHERE id = $1")
                .bind(known)
                .fetch_optional(app.pg())
                .await
                .unwrap()
        })
        .await
        .expect("an acknowledged order persisted");
        let (s, b) = app.order(v, user).await;
        assert!(
            [
                (StatusCode::CONFLICT, "already_ordered"),
                (StatusCode::CONFLICT, "sold_out")
            ]
            .contains(&(s, code(&b))),
            "{s} {b}"
        );
    }
    assert_eq!(shard_stocks(&app, v).await.len(), 4);
    let more = sell(&app, v, (1000..1300).collect()).await;
    let mut all = tally.acknowledged.clone();
    all.extend(more.accepted.values().copied());
    settle_allowing(
        "redis lost a sharded sale",
        &app,
        v,
        stock,
        &Tally {
            acknowledged: all,
            ..Default::default()
        },
        &[&app.addr],
        &["rescued_order"],
    )
    .await;
    let live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM voucher_orders WHERE voucher_id = $1 AND status IN ('created', 'paid')",
    )
    .bind(v)
    .fetch_one(app.pg())
    .await
    .unwrap();
    assert_eq!(live, stock, "the whole stock sold, exactly once");
    assert_eq!(shard_stocks(&app, v).await, vec![0, 0, 0, 0]);
}
