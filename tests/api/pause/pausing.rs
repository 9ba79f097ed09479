//! pause: `a_pause_reaches_every_instance_within_a_second_and_loses_nothing`,
//! `a_pause_without_its_event_is_still_caught_within_a_second`,
//! `pause_and_resume_refuse_what_they_cannot_do`,
//! `the_admin_list_pages_through_every_voucher_newest_first`,
//! `the_live_numbers_follow_a_sale`.
use super::*;

#[tokio::test]
async fn a_pause_reaches_every_instance_within_a_second_and_loses_nothing() {
    let ns = Namespace::new().await;
    let a = TestApp::spawn(&ns).await;
    let b = TestApp::builder(&ns).api_only().spawn().await;
    let v = a.flash_sale(100).await;
    let second = Duration::from_secs(1);
    // b learns of the new sale by its event.
    answered(&b, v, 21, "202", Duration::from_secs(5)).await;
    // Both sell; some of the orders are still on their way when the pause comes.
    let before = accepted(&wave(&a, v, 1..=20).await).len() + accepted(&wave(&b, v, 22..=40).await).len();
    assert_eq!(before, 39);

    let paused = set_paused(&a, v, "pause").await;
    assert_eq!(paused["paused"], true);
    // An order b takes before the pause reaches it is an order like any other.
    answered(&b, v, 41, "sale_paused", second).await;
    answered(&a, v, 42, "sale_paused", second).await;
    // From now on nothing is admitted anywhere.
    let admitted = a.stats(v).await["orders_accepted"].as_i64().unwrap();
    for app in [&a, &b] {
        let answers = wave(app, v, 100..=130).await;
        assert!(
            answers
                .values()
                .all(|(s, body)| *s == StatusCode::CONFLICT && code(body) == "sale_paused"),
            "{answers:?}"
        );
    }
    assert_eq!(a.stats(v).await["orders_accepted"], admitted);
    // Pausing twice is fine; the public view says so too.
    assert_eq!(set_paused(&b, v, "pause").await["paused"], true);
    assert_eq!(b.get(&format!("/api/v1/vouchers/{v}"), None).await.1["paused"], true);

    let resumed = set_paused(&b, v, "resume").await;
    assert_eq!(resumed["paused"], false);
    answered(&a, v, 43, "202", second).await;
    answered(&b, v, 44, "202", second).await;

    // Everything accepted, before and after the pause, reaches Postgres.
    let persisted = eventually(Duration::from_secs(20), || async {
        let stats = a.stats(v).await;
        (stats["orders_persisted"] == stats["orders_accepted"]).then_some(stats)
    })
    .await;
    assert!(persisted.is_some(), "orders lost: {}", a.stats(v).await);
    assert!(admitted >= 40, "{admitted}");
    assert_balanced(&a, v).await;
    b.shutdown().await;
    a.shutdown().await;
}

/// The pub/sub event is fire-and-forget: with none at all (Postgres changed
/// behind the API's back), every instance still follows within a second.
#[tokio::test]
async fn a_pause_without_its_event_is_still_caught_within_a_second() {
    let ns = Namespace::new().await;
    let a = TestApp::spawn(&ns).await;
    let b = TestApp::builder(&ns).api_only().spawn().await;
    let v = a.flash_sale(10).await;
    // b learns of the new sale by its event.
    answered(&b, v, 1, "202", Duration::from_secs(5)).await;
    for (paused, user, expected) in [(true, 2, "sale_paused"), (false, 3, "202")] {
        sqlx::query("UPDATE seckill_vouchers SET paused = $2 WHERE voucher_id = $1")
            .bind(v)
            .bind(paused)
            .execute(a.pg())
            .await
            .unwrap();
        let changed = Instant::now();
        let took = answered(&b, v, user, expected, Duration::from_secs(2)).await;
        answered(
            &a,
            v,
            user + 10,
            expected,
            Duration::from_secs(2).saturating_sub(changed.elapsed()),
        )
        .await;
        assert!(took <= Duration::from_millis(1100), "{expected} only after {took:?}");
    }
    b.shutdown().await;
    a.shutdown().await;
}

#[tokio::test]
async fn pause_and_resume_refuse_what_they_cannot_do() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(1).await;
    let (status, plain) = app
        .post(
            "/api/v1/admin/vouchers",
            Some(&app.admin()),
            json!({"shop_id": "7", "title": "plain", "pay_value": 1, "actual_value": 2}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let plain = plain["id"].as_str().unwrap().to_owned();
    for verb in ["pause", "resume"] {
        let path = |id: &str| format!("/api/v1/admin/vouchers/{id}/{verb}");
        let cases = [
            (
                path("999999"),
                Some(app.admin()),
                StatusCode::NOT_FOUND,
                "voucher_not_found",
            ),
            (
                path(&v.to_string()),
                Some(app.shopper(5)),
                StatusCode::FORBIDDEN,
                "forbidden",
            ),
            (path(&v.to_string()), None, StatusCode::UNAUTHORIZED, "unauthorized"),
            (
                path(&plain),
                Some(app.admin()),
                StatusCode::CONFLICT,
                "not_a_flash_sale",
            ),
            (
                path("abc"),
                Some(app.admin()),
                StatusCode::BAD_REQUEST,
                "validation_failed",
            ),
        ];
        for (path, token, status, error) in cases {
            let (got, body) = app.post(&path, token.as_deref(), json!({})).await;
            assert_eq!((got, code(&body)), (status, error), "{path}: {body}");
        }
    }
    // Nothing was paused by the refused requests.
    assert_eq!(app.order(v, 1).await.0, StatusCode::ACCEPTED);
    app.shutdown().await;
}

#[tokio::test]
async fn the_admin_list_pages_through_every_voucher_newest_first() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(app.flash_sale(1).await.to_string());
    }
    let admin = app.admin();
    let (status, first) = app.get("/api/v1/admin/vouchers?limit=2", Some(&admin)).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let mut seen: Vec<String> = Vec::new();
    let mut page = first;
    loop {
        seen.extend(
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v["id"].as_str().unwrap().to_owned()),
        );
        let Some(next) = page["next_before"].as_str() else {
            break;
        };
        page = app
            .get(&format!("/api/v1/admin/vouchers?limit=2&before={next}"), Some(&admin))
            .await
            .1;
    }
    ids.reverse();
    assert_eq!(seen, ids);
    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=201", "limit"),
        ("limit=x", "limit"),
        ("before=-1", "before"),
    ] {
        let (status, body) = app.get(&format!("/api/v1/admin/vouchers?{query}"), Some(&admin)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert!(body["error"]["message"].as_str().unwrap().starts_with(field), "{body}");
    }
    let (status, _) = app.get("/api/v1/admin/vouchers", Some(&app.shopper(1))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    app.shutdown().await;
}

/// The live numbers: the outbox and the relay's lag while no relay runs, then the
/// orders by outcome (paid, cancelled by the owner, timed out) once one does.
#[tokio::test]
async fn the_live_numbers_follow_a_sale() {
    let ns = Namespace::new().await;
    let api = TestApp::builder(&ns).api_only().spawn().await;
    let v = api.flash_sale(10).await;
    let shop = &api;
    let ids: Vec<String> = (1..=3)
        .map(|u| async move { shop.order(v, u).await.1["order_id"].as_str().unwrap().to_owned() })
        .collect::<futures::future::JoinAll<_>>()
        .await;
    let waiting = eventually(Duration::from_secs(5), || async {
        let l = live(&api, v).await;
        (l["relay"]["lag_ms"].as_i64().unwrap() >= 200).then_some(l)
    })
    .await
    .expect("the relay's lag grows while no relay runs");
    // Entries: the three orders left in one, two or three calls of the script.
    let backlog = waiting["relay"]["outbox_backlog"].as_i64().unwrap();
    assert!((1..=3).contains(&backlog), "{waiting:#}");
    assert_eq!(waiting["orders"]["accepted"], 3);
    assert_eq!(waiting["orders"]["persisted"], 0);
    assert_eq!(waiting["stats"]["stock_remaining"], 7);
    assert_eq!(waiting["audit"]["in_flight"]["orders"], 3);

    // A relay and a worker with a short payment window.
    let all = TestApp::builder(&ns)
        .env("SECKILL_PAYMENT_WINDOW_SECS", "3")
        .spawn()
        .await;
    eventually(Duration::from_secs(10), || async {
        let l = live(&all, v).await;
        (l["orders"]["persisted"] == 3 && l["relay"]["outbox_backlog"] == 0).then_some(())
    })
    .await
    .expect("relayed and persisted");
    let pay = |id: &String, user: i64, verb: &'static str| {
        let path = format!("/api/v1/orders/{id}/{verb}");
        let token = all.shopper(user);
        let all = &all;
        async move { all.post(&path, Some(&token), json!({})).await.0 }
    };
    assert_eq!(pay(&ids[0], 1, "pay").await, StatusCode::OK);
    assert_eq!(pay(&ids[1], 2, "cancel").await, StatusCode::OK);
    let end = eventually(Duration::from_secs(15), || async {
        let l = live(&all, v).await;
        (l["orders"]["timed_out"] == 1).then_some(l)
    })
    .await
    .expect("the unpaid order times out");
    let orders = &end["orders"];
    assert_eq!(
        (
            &orders["paid"],
            &orders["cancelled"],
            &orders["timed_out"],
            &orders["awaiting_payment"],
            &orders["failed"]
        ),
        (&json!(1), &json!(2), &json!(1), &json!(0), &json!(0)),
        "{end:#}"
    );
    assert_eq!(end["relay"], json!({"outbox_backlog": 0, "lag_ms": 0}));
    assert_eq!(end["paused"], false);
    assert_balanced(&all, v).await;
    all.shutdown().await;
    api.shutdown().await;
}
