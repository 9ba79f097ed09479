//! Sharded sales (`stock_shards`): a crowd over four shards, demand skewed onto one
//! shard (units move), a move interrupted after its give, Redis losing a sharded
//! sale, a cancellation's unit going back to its shopper's shard, validation, and
//! a move's step its replicas missed lost with its master (`lost_steps`).
use crate::faults::crowd::{crowd, settle, settle_allowing, settle_on, Tally};
use crate::helpers::*;
use reqwest::StatusCode;
use seckill::keys::shard_of;
use seckill::sales::shards;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// What a crowd was answered, every request.
struct Answers {
    /// Accepted orders by shopper.
    accepted: HashMap<i64, i64>,
    /// Count of answers by code (`accepted` for 202).
    codes: HashMap<String, usize>,
}

/// Fires `shoppers` (one request each, repeats allowed), 64 at a time; the
/// shoppers answered 503 `unavailable` (a move under way) try again, up to 20
/// rounds. Fails if a shopper gets two orders.
async fn sell(app: &TestApp, voucher: i64, shoppers: Vec<i64>) -> Answers {
    use futures::StreamExt;
    let mut out = Answers {
        accepted: HashMap::new(),
        codes: HashMap::new(),
    };
    let mut pending = shoppers;
    for _ in 0..20 {
        if pending.is_empty() {
            break;
        }
        let answers: Vec<(i64, StatusCode, Value)> = futures::stream::iter(pending.iter().map(|&u| async move {
            let (s, b) = app.order(voucher, u).await;
            (u, s, b)
        }))
        .buffer_unordered(64)
        .collect()
        .await;
        pending = Vec::new();
        for (u, s, b) in answers {
            if s == StatusCode::SERVICE_UNAVAILABLE {
                pending.push(u);
                continue;
            }
            let label = if s == StatusCode::ACCEPTED {
                let id: i64 = b["order_id"].as_str().unwrap().parse().unwrap();
                assert!(out.accepted.insert(u, id).is_none(), "shopper {u} got two orders");
                "accepted".to_owned()
            } else {
                assert_eq!(s, StatusCode::CONFLICT, "{b}");
                code(&b).to_owned()
            };
            *out.codes.entry(label).or_default() += 1;
        }
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(pending.is_empty(), "still unavailable after 20 rounds: {pending:?}");
    out
}

/// Each shard's stock from the admin view; it must sum to `stock_remaining`.
async fn shard_stocks(app: &TestApp, voucher: i64) -> Vec<i64> {
    let stats = app.stats(voucher).await;
    let shards: Vec<i64> = stats["shards"]
        .as_array()
        .unwrap_or_else(|| panic!("no shards in {stats}"))
        .iter()
        .enumerate()
        .map(|(k, s)| {
            assert_eq!(s["shard"], k, "{stats}");
            s["stock_remaining"].as_i64().unwrap()
        })
        .collect();
    assert_eq!(
        shards.iter().sum::<i64>(),
        stats["stock_remaining"].as_i64().unwrap(),
        "{stats}"
    );
    shards
}

async fn audit(app: &TestApp, voucher: i64) -> Value {
    let (status, a) = app
        .get(&format!("/api/v1/admin/vouchers/{voucher}/audit"), Some(&app.admin()))
        .await;
    assert_eq!(status, StatusCode::OK, "{a}");
    a
}

/// The first `n` shoppers whose shard of `shards` is `k`.
fn shoppers_of(k: u32, shards: u32, n: usize) -> Vec<i64> {
    (1..).filter(|u| shard_of(*u, shards) == k).take(n).collect()
}

/// How long after a unit came back a sold-out sale may go on answering `sold_out`:
/// the sold-out flag is trusted for `SOLD_OUT_TTL` (1 s), then the next order asks
/// Redis, reading every shard. The slack is for that order's refill on a shared,
/// busy machine.
const BACK_ON_SALE_WITHIN: Duration = Duration::from_millis(1_000 + 500);

/// A sale of 2 units on 4 shards sells out (one unit on each of shards 0 and 1); a
/// unit comes back on shard 1 (an INCR of its stock key, as a return or top-up
/// whose pub/sub message was lost leaves it; with `event`, the message arrives).
/// A shopper of shard 2 ordering every 50 ms gets it: returns how long it took.
async fn a_unit_back_on_shard_1_sells_to_a_shopper_of_shard_2(event: bool) -> Duration {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns)
        .env("SECKILL_RATE_LIMIT_PER_USER", "1000")
        .spawn()
        .await;
    let v = app.sharded_sale(2, 4).await;
    assert_eq!(shard_stocks(&app, v).await, vec![1, 1, 0, 0]);
    let buyers = vec![shoppers_of(0, 4, 1)[0], shoppers_of(1, 4, 1)[0]];
    assert_eq!(sell(&app, v, buyers).await.accepted.len(), 2);
    let shopper = shoppers_of(2, 4, 1)[0];
    let (s, b) = app.order(v, shopper).await;
    assert_eq!((s, code(&b)), (StatusCode::CONFLICT, "sold_out"), "{b}");
    let keys = ns.keys();
    let mut redis = app.redis().await;
    let _: i64 = redis::cmd("INCR")
        .arg(keys.stock_at(v, 1, 4))
        .query_async(&mut redis)
        .await
        .unwrap();
    let back = std::time::Instant::now();
    if event {
        let state = app.app().state();
        seckill::sales::stock::publish(&state.handles.redis, &keys, seckill::sales::stock::Event::Stock(v))
            .await
            .unwrap();
    }
    let mut answers = Vec::new();
    let sold = loop {
        let (s, b) = app.order(v, shopper).await;
        if s == StatusCode::ACCEPTED {
            break back.elapsed();
        }
        answers.push(format!("{s} {}", code(&b)));
        assert!(
            back.elapsed() < Duration::from_secs(10),
            "the unit back on shard 1 is still unsold after 10 s: {answers:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!("unit back on shard 1 (event: {event}) sold to a shopper of shard 2 after {sold:?}; before: {answers:?}");
    assert_eq!(shard_stocks(&app, v).await, vec![0, 0, 0, 0]);
    sold
}

/// Moves every unit of shard `from` to shard `to` through the ledger, as a
/// refill does (give, take, close); returns the units moved.
async fn bounce(
    conn: &mut seckill::redis_conn::Conn,
    keys: &seckill::keys::Keys,
    recovery: &seckill::recovery::Recovery,
    v: i64,
    from: u32,
    to: u32,
) -> i64 {
    let transfer = uuid::Uuid::new_v4().to_string();
    let mv = shards::Move {
        voucher: v,
        shards: 4,
        from,
        to,
        transfer: &transfer,
    };
    let (given, at, _) = shards::give(conn, keys, recovery, &mv, 1_000).await.unwrap();
    if given > 0 {
        shards::take(conn, keys, recovery, &mv, given, at).await.unwrap();
        shards::done(conn, keys, &mv).await.unwrap();
    }
    given.max(0)
}

mod crowds_and_moves;
mod doomed;
mod lost_side;
mod lost_steps;
mod returns_and_repairs;
