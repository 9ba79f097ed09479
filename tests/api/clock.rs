//! One clock: an instance whose clock is off neither gets its orders cancelled
//! early by another instance's sweep, nor sells outside the sale window.
use crate::helpers::*;
use chrono::Utc;
use reqwest::StatusCode;
use seckill::clock::Clock;
use serde_json::Value;
use std::time::Duration;

async fn order_status(app: &TestApp, id: &str) -> Value {
    let (_, o) = app.get(&format!("/api/v1/orders/{id}"), Some(&app.admin())).await;
    o["status"].clone()
}

async fn wait_created(app: &TestApp, id: &str) {
    eventually(Duration::from_secs(15), || async {
        (order_status(app, id).await == "created").then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("order {id} persisted"));
}

/// An instance 30 minutes behind admits an order: its `created_at` says it is
/// 30 minutes old the moment it is stored. The unpaid sweep (on an instance with a
/// correct clock) must judge its age by when Postgres stored it, not by the
/// admitting instance's clock.
///
/// To know that a sweep round has run without sleeping, a control order is made
/// genuinely overdue (stored 20 minutes ago as Postgres sees it): once it is
/// cancelled, the round that cancelled it has also looked at the other order.
#[tokio::test]
async fn an_order_admitted_by_an_instance_whose_clock_is_behind_is_not_swept_early() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let now = Utc::now();
    let v = app
        .flash_sale_between(10, now - chrono::Duration::hours(2), now + chrono::Duration::hours(2))
        .await;
    let behind = TestApp::builder(&ns)
        // Its clock guard off: this test is about the sweep.
        .env("SECKILL_MAX_CLOCK_SKEW_MS", "0")
        .clock(Clock::skewed(chrono::Duration::minutes(-30)))
        .api_only()
        .spawn()
        .await;
    let (status, body) = behind.order(v, 1).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let late = body["order_id"].as_str().unwrap().to_owned();
    let (status, body) = app.order(v, 2).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let control = body["order_id"].as_str().unwrap().to_owned();
    wait_created(&app, &late).await;
    wait_created(&app, &control).await;

    // Overdue as Postgres sees it (and as its own clock said): stored 20 minutes
    // ago, past the 15-minute window and the sweep's minute of grace. Either way
    // of judging age sweeps it after the other order (which looks older still).
    sqlx::query(
        "UPDATE voucher_orders SET created_at = now() - interval '20 minutes',
                persisted_at = now() - interval '20 minutes' WHERE id = $1",
    )
    .bind(control.parse::<i64>().unwrap())
    .execute(app.pg())
    .await
    .unwrap();
    eventually(Duration::from_secs(30), || async {
        (order_status(&app, &control).await == "cancelled").then_some(())
    })
    .await
    .expect("the sweep cancels the overdue control order");
    assert_eq!(
        order_status(&app, &late).await,
        "created",
        "stored moments ago: the sweep must not cancel it"
    );
    behind.shutdown().await;
    app.shutdown().await;
}

/// An instance whose clock is 5 minutes ahead would sell a sale that starts in 2
/// minutes. It answers 503 `unavailable` with Retry-After instead, for every
/// sale, until its clock is within the tolerance of Postgres's again; an instance
/// with a correct clock sells meanwhile.
#[tokio::test]
async fn an_instance_whose_clock_is_off_answers_503_instead_of_selling() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let now = Utc::now();
    let open = app.flash_sale(10).await;
    let soon = app
        .flash_sale_between(10, now + chrono::Duration::minutes(2), now + chrono::Duration::hours(1))
        .await;
    let clock = Clock::skewed(chrono::Duration::minutes(5));
    let ahead = TestApp::builder(&ns).clock(clock.clone()).api_only().spawn().await;

    for (v, user) in [(soon, 1), (open, 2)] {
        let resp = ahead
            .client
            .post(format!("{}/api/v1/vouchers/{v}/orders", ahead.addr))
            .bearer_auth(ahead.shopper(user))
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let retry = resp.headers().get("retry-after").cloned();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        assert_eq!(
            (status, code(&body)),
            (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            "voucher {v}: {body}"
        );
        assert!(retry.is_some(), "503 carries Retry-After");
    }
    let (status, body) = app.order(open, 3).await;
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "an instance with a correct clock sells: {body}"
    );

    // Its clock is put right: it sells again (and knows the other sale has not started).
    clock.set_offset(chrono::Duration::zero());
    eventually(Duration::from_secs(15), || async {
        (ahead.order(open, 4).await.0 == StatusCode::ACCEPTED).then_some(())
    })
    .await
    .expect("sells again once its clock is right");
    assert_eq!(code(&ahead.order(soon, 4).await.1), "sale_not_started");

    // Off the other way: refused again.
    clock.set_offset(chrono::Duration::minutes(-5));
    eventually(Duration::from_secs(15), || async {
        (ahead.order(open, 5).await.0 == StatusCode::SERVICE_UNAVAILABLE).then_some(())
    })
    .await
    .expect("refuses again once its clock is off");
    ahead.shutdown().await;
    app.shutdown().await;
}

/// The payment timeout is a relative TTL on a message the worker publishes after
/// it stored the order, so it runs on RabbitMQ's clock from that moment: an order
/// admitted by an instance 30 minutes behind still gets its full window. Checked
/// on Postgres's clock alone (`cancelled_at` − `persisted_at`).
#[tokio::test]
async fn the_payment_window_of_an_order_admitted_by_a_skewed_instance_starts_when_it_is_stored() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns)
        .env("SECKILL_PAYMENT_WINDOW_SECS", "2")
        .spawn()
        .await;
    let now = Utc::now();
    let v = app
        .flash_sale_between(10, now - chrono::Duration::hours(2), now + chrono::Duration::hours(2))
        .await;
    let behind = TestApp::builder(&ns)
        .env("SECKILL_MAX_CLOCK_SKEW_MS", "0")
        .clock(Clock::skewed(chrono::Duration::minutes(-30)))
        .api_only()
        .spawn()
        .await;
    let (status, body) = behind.order(v, 1).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id: i64 = body["order_id"].as_str().unwrap().parse().unwrap();
    let waited: f64 = eventually(Duration::from_secs(30), || async {
        sqlx::query_scalar(
            "SELECT extract(epoch FROM cancelled_at - persisted_at)::float8 FROM voucher_orders
              WHERE id = $1 AND status = 'cancelled'",
        )
        .bind(id)
        .fetch_optional(app.pg())
        .await
        .unwrap()
    })
    .await
    .expect("cancelled at the end of its window");
    assert!(waited >= 2.0, "cancelled {waited} s after it was stored");
    behind.shutdown().await;
    app.shutdown().await;
}

/// Admission reads the instance's clock, as the order path does: an instance
/// whose clock is past a sale's end answers its queue `closed` (with or without
/// the shopper's ticket) and takes no order with a token made by the fleet; an
/// instance with the true time admits and sells. (When the queue read the system
/// time, the instance ahead answered `admitted` with a token its own order path
/// then refused as `sale_ended`.)
#[tokio::test]
async fn an_instance_whose_clock_is_past_the_end_closes_the_queue_with_its_orders() {
    use crate::admission::{admitted, call_with, order_with, sale_with};
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let now = Utc::now();
    let v = sale_with(
        &app,
        5,
        now - chrono::Duration::seconds(1),
        now + chrono::Duration::minutes(10),
        serde_json::json!({"admission": "queue", "admit_rate": 1000}),
    )
    .await;
    let ahead = TestApp::builder(&ns)
        .env("SECKILL_MAX_CLOCK_SKEW_MS", "0")
        .clock(Clock::skewed(chrono::Duration::minutes(30)))
        .api_only()
        .spawn()
        .await;
    let (status, body) = crate::admission::join(&app, v, 1, &[]).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let ticket = body["ticket"].as_str().unwrap().to_owned();
    let on_time = admitted(&app, v, 1).await;
    let token = on_time["admission_token"].as_str().unwrap().to_owned();
    // The instance ahead: past the end by its clock, so closed (the ticket, good
    // until a minute after the end, has expired by that clock too).
    for headers in [vec![], vec![("X-Queue-Ticket", ticket.as_str())]] {
        let (status, body) = call_with(
            &ahead.client,
            &ahead.addr,
            reqwest::Method::GET,
            &format!("/api/v1/vouchers/{v}/queue/me"),
            &ahead.shopper(1),
            &headers,
            None,
        )
        .await;
        assert_eq!(
            (status, body["state"].as_str()),
            (StatusCode::OK, Some("closed")),
            "{body}"
        );
    }
    let (status, body) = order_with(&ahead, v, 1, Some(&token)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(crate::admission::code(&body), "sale_ended", "{body}");
    // The instance on time sells to the same shopper with the same token.
    let (status, body) = order_with(&app, v, 1, Some(&token)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    ahead.shutdown().await;
    app.shutdown().await;
}
