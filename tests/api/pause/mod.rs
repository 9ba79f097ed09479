//! Pausing and resuming a sale: every instance refuses orders with `sale_paused`
//! within a second (also when the pub/sub event is lost) and sells again after a
//! resume; orders admitted before the pause are not lost; the admin list and the
//! live numbers the console polls.
use crate::helpers::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

async fn set_paused(app: &TestApp, v: i64, verb: &str) -> Value {
    let (status, body) = app
        .post(
            &format!("/api/v1/admin/vouchers/{v}/{verb}"),
            Some(&app.admin()),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{verb}: {body}");
    assert_eq!(body["id"], v.to_string());
    body
}

/// Waits (at most `within`) until an order of `user` on `app` gets `expected`
/// (a status code, or an error code); returns how long it took.
async fn answered(app: &TestApp, v: i64, user: i64, expected: &str, within: Duration) -> Duration {
    let start = Instant::now();
    let seen = eventually(within, || async {
        let (status, body) = app.order(v, user).await;
        let got = if status.is_success() {
            status.as_str().to_owned()
        } else {
            code(&body).to_owned()
        };
        (got == expected).then_some(())
    })
    .await;
    assert!(seen.is_some(), "no {expected} for user {user} within {within:?}");
    start.elapsed()
}

async fn live(app: &TestApp, v: i64) -> Value {
    let (status, body) = app
        .get(&format!("/api/v1/admin/vouchers/{v}/live"), Some(&app.admin()))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

mod pausing;
