//! Placing an order under real concurrency: a flash crowd buys exactly the stock,
//! once per shopper; the sale window and the voucher's kind come from the cache; an
//! order is pending, then created; the sold-out flag answers without Redis for a
//! bounded time and stays correct when stock comes back.
use crate::fixtures::OwnRedis;
use crate::helpers::*;
use futures::future::join_all;
use reqwest::StatusCode;
use seckill::sales::cache::SOLD_OUT_TTL;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Order-script calls this instance made (`reserve.lua` round trips).
pub(crate) async fn reserve_calls(app: &TestApp) -> u64 {
    app.metric("seckill_reserve_lua_seconds_count").await as u64
}

/// A one-unit sale, sold out on an instance started after the sale was created.
/// That instance loaded the voucher from Postgres at start, so no event about it
/// is still on its way to replace its cache entry (which would drop the flag).
/// Also returns an instant before the flag was set.
async fn sold_out_on_a_quiet_instance(ns: &Namespace) -> (TestApp, TestApp, i64, std::time::Instant) {
    let app = TestApp::spawn(ns).await;
    let v = app.flash_sale(1).await;
    let quiet = TestApp::builder(ns).api_only().spawn().await;
    eventually(Duration::from_secs(5), || async {
        (quiet.order(v, 1).await.0 == StatusCode::ACCEPTED).then_some(())
    })
    .await
    .expect("the instance loaded the sale");
    let flagged = std::time::Instant::now();
    let (status, body) = quiet.order(v, 2).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "sold_out"),
        "Redis says so: the flag is set"
    );
    (app, quiet, v, flagged)
}

/// Orders one after another for a sold-out sale, each answered `sold_out`, noting
/// when each order-script call happened.
struct SoldOutStream<'a> {
    app: &'a TestApp,
    voucher: i64,
    sent: i64,
    counted: u64,
    /// Per call, an interval it happened in: (order sent, call counted).
    calls: Vec<(Instant, Instant)>,
}

impl<'a> SoldOutStream<'a> {
    async fn new(app: &'a TestApp, voucher: i64) -> Self {
        let counted = reserve_calls(app).await;
        Self {
            app,
            voucher,
            sent: 0,
            counted,
            calls: Vec::new(),
        }
    }

    async fn order(&mut self) {
        self.sent += 1;
        let sent = Instant::now();
        let (status, body) = self.app.order(self.voucher, 1_000 + self.sent).await;
        assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "sold_out"), "{body}");
        let counted = reserve_calls(self.app).await;
        let at = Instant::now();
        for _ in self.counted..counted {
            self.calls.push((sent, at));
        }
        self.counted = counted;
    }
}

/// An ordinary voucher written to Postgres alone, with no event: only a full
/// reload brings it into an instance's cache.
async fn voucher_without_an_event(app: &TestApp) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO vouchers (shop_id, title, pay_value, actual_value) VALUES (1, 'reload marker', 0, 0) RETURNING id",
    )
    .fetch_one(app.pg())
    .await
    .unwrap()
}

mod crowd_and_window;
mod marks;
mod polls;
mod shared_ids;
mod sold_out_flag;
