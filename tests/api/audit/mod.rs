//! `GET /api/v1/admin/vouchers/{id}/audit`: the sale's books, and the
//! `seckill_sales_unbalanced` gauge.
use crate::helpers::*;
use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

async fn audit(app: &TestApp, voucher: i64) -> Value {
    let (status, body) = app
        .get(&format!("/api/v1/admin/vouchers/{voucher}/audit"), Some(&app.admin()))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// The value of one series on `/metrics` (None if absent).
async fn gauge(app: &TestApp, series: &str) -> Option<f64> {
    let text = app.metrics_text();
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

mod answers;
mod books;
