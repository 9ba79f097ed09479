//! What a client expects of a well-kept HTTP API: `Location` on 201 and 202, an
//! `X-Request-Id` on every answer, `already_ordered` naming the existing order,
//! and `Idempotency-Key` on the admin's create and top-up.
use crate::helpers::*;
use crate::orders::reserve_calls;
use reqwest::StatusCode;
use serde_json::{json, Value};

fn flash_body(title: &str) -> Value {
    let now = chrono::Utc::now();
    json!({"shop_id": "7", "title": title, "pay_value": 100, "actual_value": 1000, "stock": 10,
           "begin_at": (now - chrono::Duration::seconds(1)).to_rfc3339(),
           "end_at": (now + chrono::Duration::hours(1)).to_rfc3339()})
}

/// A POST with an optional Idempotency-Key: status, Location, body.
async fn post_keyed(app: &TestApp, path: &str, key: Option<&str>, body: &Value) -> (StatusCode, Option<String>, Value) {
    let mut req = app
        .client
        .post(format!("{}{path}", app.addr))
        .bearer_auth(app.admin())
        .json(body);
    if let Some(key) = key {
        req = req.header("Idempotency-Key", key);
    }
    let resp = req.send().await.unwrap();
    let location = resp.headers().get("location").map(|v| v.to_str().unwrap().to_owned());
    (resp.status(), location, resp.json().await.unwrap_or(Value::Null))
}

mod answers;
mod document;
