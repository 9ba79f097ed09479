//! The waiting room:
//! - `thousands_are_admitted_in_place_order_at_the_set_rate_early_arrivals_shuffled`;
//! - `the_frontier_holds_while_the_admitted_could_take_every_unit`;
//! - `a_pause_longer_than_a_turn_stops_the_queues_clock`;
//! - `an_older_binarys_pause_and_moves_keep_the_clock`;
//! - `the_frontier_reads_the_stock_after_the_live_orders`.
use super::*;
use futures::stream::{self, StreamExt};
use std::collections::HashMap;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thousands_are_admitted_in_place_order_at_the_set_rate_early_arrivals_shuffled() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let (early_n, late_n, rate) = (1500_i64, 300_i64, 400_i64);
    let begin = Utc::now() + chrono::Duration::seconds(20);
    let v = sale_with(
        &app,
        100_000,
        begin,
        begin + chrono::Duration::hours(1),
        json!({"admission": "queue", "admit_rate": rate}),
    )
    .await;
    // Early arrivals, 32 at a time; the order their joins were answered in.
    let answered = std::sync::Mutex::new(Vec::new());
    stream::iter(1..=early_n)
        .for_each_concurrent(32, |user| {
            let (app, answered) = (&app, &answered);
            async move {
                let (status, body) = join(app, v, user, &[]).await;
                assert_eq!(status, StatusCode::CREATED, "{body}");
                assert_eq!(body["state"], "waiting_for_start", "joined before begin_at: {body}");
                answered.lock().unwrap().push(user);
            }
        })
        .await;
    assert!(
        Utc::now() < begin,
        "the early joins took longer than the 20 s before begin_at"
    );
    let early_order = answered.into_inner().unwrap();
    tokio::time::sleep((begin - Utc::now()).to_std().unwrap_or_default() + Duration::from_millis(200)).await;
    // Late arrivals, one after the other: they join the end in arrival order.
    // Until the early arrivals' places are sealed (in the background, once
    // begin_at has passed) a late join is answered 503 at once: a shopper's app
    // tries again, as this one does.
    let mut late_places = Vec::new();
    let sealed_by = std::time::Instant::now() + Duration::from_secs(30);
    for user in early_n + 1..=early_n + late_n {
        let (status, body) = loop {
            let (status, body) = join(&app, v, user, &[]).await;
            if status != StatusCode::SERVICE_UNAVAILABLE || std::time::Instant::now() > sealed_by {
                break (status, body);
            }
            assert_eq!(code(&body), "unavailable", "{body}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(status, StatusCode::CREATED, "{body}");
        late_places.push(body["place"].as_i64().expect("a late arrival's place at once"));
    }
    let expected: Vec<i64> = (early_n + 1..=early_n + late_n).collect();
    assert_eq!(
        late_places, expected,
        "late arrivals take the next places in arrival order"
    );

    // Everyone polls until admitted; each answer's frontier is checked against the rate.
    let mut place_of: HashMap<i64, i64> = HashMap::new();
    let mut admitted_seen: HashMap<i64, i64> = HashMap::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let waiting: Vec<i64> = (1..=early_n + late_n)
            .filter(|u| !admitted_seen.contains_key(u))
            .collect();
        if waiting.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} shoppers never admitted",
            waiting.len()
        );
        let answers: Vec<(i64, Value, DateTime<Utc>)> = stream::iter(waiting)
            .map(|user| {
                let app = &app;
                async move {
                    let (status, body) = poll(app, v, user, None).await;
                    assert_eq!(status, StatusCode::OK, "{body}");
                    (user, body, Utc::now())
                }
            })
            .buffer_unordered(32)
            .collect()
            .await;
        for (user, body, at) in answers {
            let place = body["place"].as_i64().expect("a place after begin_at");
            assert_eq!(*place_of.entry(user).or_insert(place), place, "a place never changes");
            let upto = body["admitted_upto"].as_i64().unwrap();
            // Never faster than the rate (plus the one second's burst it may bank).
            let elapsed = (at - begin).num_milliseconds().max(0) as f64 / 1000.0;
            assert!(
                upto as f64 <= rate as f64 * (elapsed + 1.0) + 1.0,
                "{upto} admitted {elapsed:.2} s after begin_at at {rate}/s"
            );
            match body["state"].as_str().unwrap() {
                "admitted" => {
                    assert!(place <= upto && body["admission_token"].is_string(), "{body}");
                    admitted_seen.insert(user, place);
                }
                "waiting" => {
                    assert!(place > upto && body["admission_token"].is_null(), "{body}");
                    assert_eq!(body["position"].as_i64().unwrap(), place - upto - 1, "{body}");
                }
                other => panic!("state {other}: {body}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Places: a permutation of 1..=n; the early arrivals hold exactly 1..=early_n.
    let mut places: Vec<i64> = place_of.values().copied().collect();
    places.sort();
    assert_eq!(places, (1..=early_n + late_n).collect::<Vec<_>>());
    assert!((1..=early_n).all(|u| place_of[&u] <= early_n));
    // Shuffled: in the order their joins were answered, about half of the
    // neighbours' places go up (all of them would, first come first served).
    let ups = early_order
        .windows(2)
        .filter(|w| place_of[&w[0]] < place_of[&w[1]])
        .count();
    let share = ups as f64 / (early_order.len() - 1) as f64;
    assert!(
        (0.4..0.6).contains(&share),
        "early arrivals' places in join order go up {share:.3} of the time"
    );
    // The frontier moved forward only, in time order.
    let moves: Vec<(i64, DateTime<Utc>)> =
        sqlx::query_as("SELECT upto, at FROM queue_admits WHERE voucher_id = $1 ORDER BY upto")
            .bind(v)
            .fetch_all(app.pg())
            .await
            .unwrap();
    assert!(moves.windows(2).all(|w| w[0].1 < w[1].1), "moves in time order");
    assert_eq!(moves.last().unwrap().0, early_n + late_n);
    let span = (moves.last().unwrap().1 - begin).num_milliseconds() as f64 / 1000.0;
    println!(
        "queue: {} shoppers admitted over {span:.2} s at {rate}/s in {} moves",
        early_n + late_n,
        moves.len()
    );
    // Not far below the rate either: the instance moves a running queue four times a
    // second whether or not anyone polls (4.62 s here alone; at half the rate it
    // would take 9 s).
    let at_rate = (early_n + late_n) as f64 / rate as f64;
    assert!(
        span <= at_rate + 2.0,
        "{span:.2} s to admit what the rate admits in {at_rate:.2} s"
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_frontier_holds_while_the_admitted_could_take_every_unit() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let now = Utc::now();
    let v = sale_with(
        &app,
        3,
        now - chrono::Duration::seconds(1),
        now + chrono::Duration::hours(1),
        json!({"admission": "queue", "admit_rate": 1000, "turn_secs": 20}),
    )
    .await;
    for user in 1..=10 {
        assert_eq!(join(&app, v, user, &[]).await.0, StatusCode::CREATED);
    }
    let upto = || async {
        let (_, b) = poll(&app, v, 10, None).await;
        (b["admitted_upto"].as_i64().unwrap(), b["held"].as_bool().unwrap())
    };
    // Three units: three admitted, then held.
    let first = eventually(Duration::from_secs(10), || async {
        Some(upto().await).filter(|u| *u == (3, true))
    })
    .await;
    assert_eq!(first, Some((3, true)));
    // Two of them order: one unit left, one admitted shopper who may still take it.
    for user in [1, 2] {
        let a = admitted(&app, v, user).await;
        let (status, body) = order_with(&app, v, user, a["admission_token"].as_str()).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    wait_stored(&app, v, 2, Duration::from_secs(20), "two orders").await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(upto().await, (3, true), "shopper 3 could still take the last unit");
    // Shopper 3's turn ends unused: the last unit goes to place 4.
    let third = admitted(&app, v, 3).await;
    let ends: DateTime<Utc> = third["turn_ends_at"].as_str().unwrap().parse().unwrap();
    tokio::time::sleep((ends - Utc::now()).to_std().unwrap_or_default() + Duration::from_millis(300)).await;
    let (_, b3) = poll(&app, v, 3, None).await;
    assert_eq!(b3["state"], "turn_ended", "{b3}");
    assert!(b3["admission_token"].is_null());
    let moved = eventually(Duration::from_secs(10), || async {
        Some(upto().await).filter(|u| *u == (4, true))
    })
    .await;
    assert_eq!(moved, Some((4, true)));
    let fourth = admitted(&app, v, 4).await;
    let ends4: DateTime<Utc> = fourth["turn_ends_at"].as_str().unwrap().parse().unwrap();
    // A return reopens at once: shopper 1 cancels, and one more is admitted while
    // place 4's turn (which holds the last unit) is still running.
    let (status, mine) = app
        .get(&format!("/api/v1/vouchers/{v}/orders/mine"), Some(&app.shopper(1)))
        .await;
    assert_eq!(status, StatusCode::OK, "{mine}");
    let order = mine["order_id"].as_str().unwrap();
    let (status, body) = app
        .post(
            &format!("/api/v1/orders/{order}/cancel"),
            Some(&app.shopper(1)),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let reopened = eventually(Duration::from_secs(20), || async {
        Some(upto().await).filter(|u| u.0 >= 5)
    })
    .await;
    assert_eq!(reopened.map(|u| u.0), Some(5), "one unit back, one more admitted");
    assert!(
        Utc::now() < ends4,
        "the return, not the end of place 4's turn, reopened the queue"
    );
    app.shutdown().await;
}

/// A queue sale (a shopper a second, turns of 6 s) paused for 8 s, longer than a
/// turn, and resumed: the frontier did not move while it was paused, the shopper
/// admitted just before the pause is still admitted after it and orders with the
/// token they had (before, the turn ran through the pause: 403
/// `admission_expired`, and the frontier admitted six more shoppers into a sale
/// nobody could buy from), and the frontier goes on at its rate from where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pause_longer_than_a_turn_stops_the_queues_clock() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let now = Utc::now();
    let v = sale_with(
        &app,
        100,
        now - chrono::Duration::seconds(1),
        now + chrono::Duration::hours(1),
        json!({"admission": "queue", "admit_rate": 1, "turn_secs": 6}),
    )
    .await;
    for user in 1..=12 {
        assert_eq!(join(&app, v, user, &[]).await.0, StatusCode::CREATED);
    }
    let upto = || async {
        let (_, b) = poll(&app, v, 12, None).await;
        b["admitted_upto"].as_i64().unwrap()
    };
    // Shopper 1 admitted, with a token; then the pause, at once.
    let first = admitted(&app, v, 1).await;
    let token = first["admission_token"].as_str().unwrap().to_owned();
    let admin = |action: &'static str| {
        let app = &app;
        async move {
            let (status, body) = app
                .post(
                    &format!("/api/v1/admin/vouchers/{v}/{action}"),
                    Some(&app.admin()),
                    json!({}),
                )
                .await;
            assert_eq!(status, StatusCode::OK, "{action}: {body}");
        }
    };
    admin("pause").await;
    let at_pause = upto().await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let (_, during) = poll(&app, v, 1, None).await;
    assert_eq!(upto().await, at_pause, "the frontier moved while the sale was paused");
    assert_eq!(during["state"], "admitted", "shopper 1 during the pause: {during}");
    admin("resume").await;
    // The token from before the pause still admits: the turn stood still.
    let (status, body) = order_with(&app, v, 1, Some(&token)).await;
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "shopper 1's token after the pause: {body}"
    );
    let after = upto().await;
    assert!(
        after <= at_pause + 1,
        "the frontier after the pause: {after}, {at_pause} at the pause"
    );
    // And it goes on at its rate.
    let moved = eventually(Duration::from_secs(10), || async {
        (upto().await >= at_pause + 2).then_some(())
    })
    .await;
    assert!(moved.is_some(), "the frontier moves again after the resume");
    app.shutdown().await;
}

/// During a rolling upgrade an older binary pauses and resumes with the flag
/// alone, and writes the frontier's moves without their clock: the queue's clock
/// follows all the same (migration 0025's triggers), so a queue paused by one
/// binary and resumed by the other does not stay stopped, and a move has its clock.
#[tokio::test]
async fn an_older_binarys_pause_and_moves_keep_the_clock() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let now = Utc::now();
    let v = sale_with(
        &app,
        10,
        now + chrono::Duration::hours(1),
        now + chrono::Duration::hours(2),
        json!({"admission": "queue", "admit_rate": 1, "turn_secs": 60}),
    )
    .await;
    let clock = || async {
        sqlx::query_as::<_, (Option<DateTime<Utc>>, f64)>(
            "SELECT paused_at, paused_secs FROM admission_queues WHERE voucher_id = $1",
        )
        .bind(v)
        .fetch_one(app.pg())
        .await
        .unwrap()
    };
    let pg = app.pg().clone();
    let flag = |paused: bool| {
        let pg = pg.clone();
        async move {
            sqlx::query("UPDATE seckill_vouchers SET paused = $2 WHERE voucher_id = $1")
                .bind(v)
                .bind(paused)
                .execute(&pg)
                .await
                .unwrap();
        }
    };
    // Paused by this binary, resumed by an older one (the flag alone).
    let (status, body) = app
        .post(
            &format!("/api/v1/admin/vouchers/{v}/pause"),
            Some(&app.admin()),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(clock().await.0.is_some(), "paused: the clock stands");
    tokio::time::sleep(Duration::from_millis(300)).await;
    flag(false).await;
    let (paused_at, paused_secs) = clock().await;
    assert!(paused_at.is_none(), "resumed by the flag alone: the clock runs");
    assert!((0.3..5.0).contains(&paused_secs), "{paused_secs} s paused");
    // Paused again by an older binary: a pause is going on.
    flag(true).await;
    assert!(clock().await.0.is_some());
    flag(true).await;
    // A move it writes without a clock gets the queue's clock at its time.
    sqlx::query("INSERT INTO queue_admits (voucher_id, upto, at) VALUES ($1, 1, now())")
        .bind(v)
        .execute(app.pg())
        .await
        .unwrap();
    let (clock_of_move, unix): (f64, f64) =
        sqlx::query_as("SELECT clock, extract(epoch FROM at)::float8 FROM queue_admits WHERE voucher_id = $1")
            .bind(v)
            .fetch_one(app.pg())
            .await
            .unwrap();
    let behind = unix - clock_of_move;
    assert!(
        (paused_secs..paused_secs + 5.0).contains(&behind),
        "the move's clock is unix time less the pauses: {behind} s behind, {paused_secs} s paused"
    );
    app.shutdown().await;
}

/// The frontier's rule reads the stock after it counts the live orders: a
/// shopper's order stored in Postgres took its unit in Redis before, so a
/// reading of the stock taken before the count (one unit too many) must not
/// count that order both as a unit on sale and as a shopper done ordering. Three
/// units, three admitted, one of them has ordered: with the stock read 3 before
/// the count and 2 after, the frontier holds; fed 3 both times (what reading it
/// before the count alone would see), it admits a fourth shopper for two units.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_frontier_reads_the_stock_after_the_live_orders() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let now = Utc::now();
    let begin = now - chrono::Duration::seconds(1);
    let v = sale_with(
        &app,
        3,
        begin,
        now + chrono::Duration::hours(1),
        json!({"admission": "queue", "admit_rate": 1000, "turn_secs": 600}),
    )
    .await;
    for user in 1..=10 {
        assert_eq!(join(&app, v, user, &[]).await.0, StatusCode::CREATED);
    }
    let held = eventually(Duration::from_secs(10), || async {
        let (_, b) = poll(&app, v, 10, None).await;
        (b["admitted_upto"] == 3 && b["held"] == true).then_some(())
    })
    .await;
    assert!(held.is_some(), "three admitted, then held");
    let a = admitted(&app, v, 1).await;
    let (status, body) = order_with(&app, v, 1, a["admission_token"].as_str()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    wait_stored(&app, v, 1, Duration::from_secs(20), "shopper 1's order").await;
    // Readings of the stock, in the order the rule asks for them.
    let fed = |readings: Vec<i64>| {
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        move || {
            let i = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let units = readings[i.min(readings.len() - 1)];
            async move { Ok::<i64, anyhow::Error>(units) }
        }
    };
    // (A few milliseconds since the last move: at 1000 a second some shoppers are
    // due, so that the rule is asked.)
    tokio::time::sleep(Duration::from_millis(20)).await;
    let f = seckill::admission::advance::advance(app.pg(), v, begin, fed(vec![3, 2]), 600)
        .await
        .unwrap();
    assert_eq!((f.admitted, f.held), (3, true), "stock read after the count: holds");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let f = seckill::admission::advance::advance(app.pg(), v, begin, fed(vec![3, 3]), 600)
        .await
        .unwrap();
    assert_eq!(
        f.admitted, 4,
        "the stale reading alone admits a fourth shopper for two units"
    );
    app.shutdown().await;
}
