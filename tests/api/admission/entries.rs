//! A raffle's edges: `the_same_shopper_entering_twice_at_once_gets_one_entry`,
//! `a_raffle_draws_in_the_future_and_before_its_end`,
//! `a_bad_beacon_is_refused_in_every_mode`.
use super::raffle::{enter, entry};
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_shopper_entering_twice_at_once_gets_one_entry() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let draw_at = Utc::now() + chrono::Duration::minutes(10);
    let v = sale_with(
        &app,
        3,
        draw_at,
        draw_at + chrono::Duration::hours(1),
        json!({"admission": "raffle"}),
    )
    .await;
    for user in 1..=40_i64 {
        let shopper = app.shopper(user);
        let answers = futures::future::join_all((0..8).map(|_| enter(&app.addr, &shopper, v))).await;
        let mut statuses: Vec<u16> = answers.iter().map(|(s, _)| s.as_u16()).collect();
        statuses.sort();
        assert_eq!(
            statuses,
            [vec![200; 7], vec![201]].concat(),
            "shopper {user}: {answers:?}"
        );
        assert!(answers.iter().all(|(_, b)| b["entry"] == entry(v, user)), "{answers:?}");
    }
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM raffle_entries WHERE voucher_id = $1")
        .bind(v)
        .fetch_one(app.pg())
        .await
        .unwrap();
    assert_eq!(n, 40);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_raffle_draws_in_the_future_and_before_its_end() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let now = Utc::now();
    let hour = chrono::Duration::hours(1);
    let create = |begin: DateTime<Utc>, end: DateTime<Utc>, extra: Value| {
        let app = &app;
        async move {
            let mut body = json!({"shop_id": "7", "title": "fair", "pay_value": 100, "actual_value": 1000,
                                  "stock": 3, "admission": "raffle",
                                  "begin_at": begin.to_rfc3339(), "end_at": end.to_rfc3339()});
            for (k, v) in extra.as_object().unwrap() {
                body[k] = v.clone();
            }
            app.post("/api/v1/admin/vouchers", Some(&app.admin()), body).await
        }
    };
    // A draw in the past (given, or by default the sale's begin_at).
    for (begin, extra) in [
        (now + hour, json!({"draw_at": (now - hour).to_rfc3339()})),
        (now - hour, json!({})),
    ] {
        let (status, body) = create(begin, now + hour * 2, extra).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(
            body["error"]["message"].as_str().unwrap().starts_with("draw_at"),
            "{body}"
        );
    }
    // At or after the end.
    let (status, body) = create(
        now + hour,
        now + hour * 2,
        json!({"draw_at": (now + hour * 2).to_rfc3339()}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // Before the start is fine (entries close, winners order once the sale opens).
    let (status, body) = create(
        now + hour,
        now + hour * 2,
        json!({"draw_at": (now + hour / 2).to_rfc3339()}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["admission"], "raffle");
    app.shutdown().await;
}

/// A `beacon` the schema refuses is refused whatever the sale's mode, though
/// only a raffle uses it (schemathesis found a first-come sale created with
/// round -15239).
#[tokio::test]
async fn a_bad_beacon_is_refused_in_every_mode() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let now = Utc::now();
    let hour = chrono::Duration::hours(1);
    let key = seckill::admission::beacon::QUICKNET_PUBLIC_KEY;
    let chain = |key: &str, round: Value| {
        json!({"public_key": key, "genesis_time": seckill::admission::beacon::QUICKNET_GENESIS,
               "period": 3, "round": round})
    };
    // The identity point: every round's signature would be known.
    let identity = format!("c0{}", "0".repeat(190));
    let bad = [
        (chain(key, json!(-15239)), "beacon.round"),
        (chain(key, json!(0)), "beacon.round"),
        (chain(key, json!("1")), "beacon.round"),
        (chain(&key[2..], json!(1)), "beacon.public_key"),
        (chain(&identity, json!(1)), "beacon.public_key"),
        (json!({"period": 3, "genesis_time": 0}), "beacon.public_key"),
        (json!([1]), "beacon"),
    ];
    for mode in ["first_come", "queue", "raffle"] {
        for (beacon, field) in &bad {
            let (status, body) = app
                .post(
                    "/api/v1/admin/vouchers",
                    Some(&app.admin()),
                    json!({"shop_id": "7", "title": "fair", "pay_value": 100, "actual_value": 1000,
                           "stock": 3, "admission": mode, "beacon": beacon,
                           "begin_at": (now + hour).to_rfc3339(), "end_at": (now + hour * 2).to_rfc3339()}),
                )
                .await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{mode} {beacon}: {body}");
            assert!(
                body["error"]["message"].as_str().unwrap().starts_with(field),
                "{mode} {beacon}: {body}"
            );
        }
        // A good chain is taken in every mode; a round named is checked
        // against draw_at only where there is a draw.
        let (status, body) = app
            .post(
                "/api/v1/admin/vouchers",
                Some(&app.admin()),
                json!({"shop_id": "7", "title": "fair", "pay_value": 100, "actual_value": 1000,
                       "stock": 3, "admission": mode, "beacon": chain(key, json!(1)),
                       "begin_at": (now + hour).to_rfc3339(), "end_at": (now + hour * 2).to_rfc3339()}),
            )
            .await;
        if mode == "raffle" {
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
            assert!(
                body["error"]["message"].as_str().unwrap().starts_with("beacon.round"),
                "{body}"
            );
        } else {
            assert_eq!(status, StatusCode::CREATED, "{mode}: {body}");
        }
    }
    app.shutdown().await;
}
