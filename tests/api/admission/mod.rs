//! Fair admission: a sale's waiting room (`queue`), its raffle, the
//! admission token the order endpoint requires of them, the proof of work, and
//! crashes of the API during a queue or a draw.
//! - `queue.rs`: thousands of shoppers admitted in place order at the set rate,
//!   early arrivals shuffled; the frontier held while the admitted shoppers could
//!   take every unit, moving again when turns end and units come back.
//! - `tokens.rs`: tokens missing, forged, another shopper's, another sale's or
//!   expired are refused; the right one orders once.
//! - `pow.rs`: a proof of work missing, wrong or below the sale's difficulty is
//!   refused; one place per shopper however often it asks.
//! - `raffle.rs`: the winners recomputed by the test from the published seed,
//!   entries and beacon round; winners order, others are told.
//! - `operator.rs`: an operator who knows the seed and the key cannot steer the
//!   draw; `seckill raffle verify` recomputes it and catches a swapped winner.
//! - `addresses.rs`: a sale's cap on places and entries per client address,
//!   also under concurrency and behind trusted proxies.
//! - `relay.rs`: with `SECKILL_BEACON_URL`, the round is fetched from a drand
//!   relay (the test's own) and the raffle drawn with nobody submitting it.
//! - `held.rs`: while the draw's or the seal's lock is held, every request is
//!   answered at once (the result, or 503).
//! - `entries.rs`: one entry for a shopper entering twice at once; a draw
//!   in the future and before the end.
//! - `crash.rs`: kill -9 during the joins, during the seal and during the draw:
//!   no place and no win lost.
use crate::helpers::*;
use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};

mod addresses;
mod crash;
mod entries;
mod held;
mod operator;
mod pow;
mod queue;
mod raffle;
mod relay;
mod tokens;

/// A sale of `admission` (with `extra` fields) over `begin..end`.
pub async fn sale_with(app: &TestApp, stock: i64, begin: DateTime<Utc>, end: DateTime<Utc>, extra: Value) -> i64 {
    create_sale(&app.addr, &app.admin(), stock, begin, end, extra).await
}

/// The same through any base URL.
pub async fn create_sale(
    base: &str,
    admin: &str,
    stock: i64,
    begin: DateTime<Utc>,
    end: DateTime<Utc>,
    extra: Value,
) -> i64 {
    let mut body = json!({"shop_id": "7", "title": "fair", "pay_value": 100, "actual_value": 1000, "stock": stock,
                          "begin_at": begin.to_rfc3339(), "end_at": end.to_rfc3339()});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let (status, body) = call(
        base,
        reqwest::Method::POST,
        "/api/v1/admin/vouchers",
        admin,
        &[],
        Some(body),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["id"].as_str().unwrap().parse().unwrap()
}

/// One request with a bearer token and extra headers, on a client of its own.
pub async fn call(
    base: &str,
    method: reqwest::Method,
    path: &str,
    token: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (StatusCode, Value) {
    let client = reqwest::Client::builder()
        .pool_idle_timeout(std::time::Duration::from_secs(2))
        .build()
        .unwrap();
    call_with(&client, base, method, path, token, headers, body).await
}

/// The same on `client` (its pooled connections).
pub async fn call_with(
    client: &reqwest::Client,
    base: &str,
    method: reqwest::Method,
    path: &str,
    token: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = client.request(method, format!("{base}{path}")).bearer_auth(token);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.expect("request sent");
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

pub async fn join(app: &TestApp, voucher: i64, user: i64, headers: &[(&str, &str)]) -> (StatusCode, Value) {
    call_with(
        &app.client,
        &app.addr,
        reqwest::Method::POST,
        &format!("/api/v1/vouchers/{voucher}/queue"),
        &app.shopper(user),
        headers,
        None,
    )
    .await
}

pub async fn poll(app: &TestApp, voucher: i64, user: i64, ticket: Option<&str>) -> (StatusCode, Value) {
    let headers: Vec<(&str, &str)> = ticket.map(|t| vec![("X-Queue-Ticket", t)]).unwrap_or_default();
    call_with(
        &app.client,
        &app.addr,
        reqwest::Method::GET,
        &format!("/api/v1/vouchers/{voucher}/queue/me"),
        &app.shopper(user),
        &headers,
        None,
    )
    .await
}

pub async fn order_with(app: &TestApp, voucher: i64, user: i64, token: Option<&str>) -> (StatusCode, Value) {
    let headers: Vec<(&str, &str)> = token.map(|t| vec![("X-Admission-Token", t)]).unwrap_or_default();
    call_with(
        &app.client,
        &app.addr,
        reqwest::Method::POST,
        &format!("/api/v1/vouchers/{voucher}/orders"),
        &app.shopper(user),
        &headers,
        Some(json!({})),
    )
    .await
}

/// Polls `user` until admitted; returns the answer with its token.
pub async fn admitted(app: &TestApp, voucher: i64, user: i64) -> Value {
    eventually(std::time::Duration::from_secs(30), || async {
        let (status, body) = poll(app, voucher, user, None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        (body["state"] == "admitted").then_some(body)
    })
    .await
    .unwrap_or_else(|| panic!("shopper {user} admitted within 30 s"))
}

pub fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("")
}
