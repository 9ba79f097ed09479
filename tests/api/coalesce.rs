//! Coalesced reservations (issue 23): one call of `lua/reserve.lua` carries every
//! order waiting at a shard's gate, and each shopper gets exactly the answer one
//! call of their own would have given, the stock exact.
use crate::helpers::*;
use redis::Value;
use reqwest::StatusCode;
use std::collections::HashMap;

/// The order script, as the service runs it.
fn script() -> redis::Script {
    redis::Script::new(include_str!("../../lua/reserve.lua"))
}

/// Runs the script for `asks` (user, order id) on shard 0 of `v`; the replies.
async fn call(
    conn: &mut seckill::redis_conn::Conn,
    keys: &seckill::keys::Keys,
    v: i64,
    asks: &[(i64, i64)],
) -> Vec<Value> {
    let s = script();
    let mut inv = s.key(keys.stock_at(v, 0, 1));
    inv.key(keys.buyers_at(v, 0, 1))
        .key(keys.admitted_at(v, 0, 1))
        .key(keys.outbox_at(v, 0, 1))
        .arg(v);
    for (user, id) in asks {
        inv.arg(user).arg(id).arg(1_700_000_000_000i64 + id);
    }
    match inv.invoke_async(&mut *conn).await.unwrap() {
        Value::Array(replies) => replies,
        other => panic!("not one reply per order: {other:?}"),
    }
}

fn already(id: i64) -> Value {
    Value::Array(vec![Value::Int(-2), Value::BulkString(id.to_string().into_bytes())])
}

/// One call with shoppers accepted, one repeating within the call, one who
/// bought before the call, and shoppers refused once the stock is gone: each
/// answer is what a call of their own, in the same order, would say; the stock,
/// the marks, the count of admitted orders and the outbox hold exactly the
/// accepted orders.
#[tokio::test]
async fn one_call_answers_each_order_as_alone_and_keeps_the_stock_exact() {
    let ns = Namespace::new().await;
    // No relay: the outbox keeps what the script wrote.
    let app = TestApp::builder(&ns).api_only().spawn().await;
    let v = app.flash_sale(3).await;
    let keys = ns.keys();
    let mut conn = app.redis().await;
    // Shopper 9 bought before this call (a call of its own).
    assert_eq!(call(&mut conn, &keys, v, &[(9, 900)]).await, vec![Value::Int(2)]);
    let asks = [
        (1, 101),
        (2, 102),
        (1, 103),
        (9, 104),
        (3, 105),
        (4, 106),
        (2, 107),
        (5, 108),
    ];
    let replies = call(&mut conn, &keys, v, &asks).await;
    assert_eq!(
        replies,
        vec![
            Value::Int(1),
            Value::Int(0),
            already(101),
            already(900),
            Value::Int(-1),
            Value::Int(-1),
            already(102),
            Value::Int(-1),
        ]
    );
    type Books = (i64, HashMap<String, String>, i64, redis::streams::StreamRangeReply);
    let (stock, buyers, admitted, outbox): Books = redis::pipe()
        .get(keys.stock_at(v, 0, 1))
        .hgetall(keys.buyers_at(v, 0, 1))
        .get(keys.admitted_at(v, 0, 1))
        .cmd("XRANGE")
        .arg(keys.outbox_at(v, 0, 1))
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(stock, 0, "three units, three orders");
    // Each mark names the shopper's order and its time.
    let marks: HashMap<&str, &str> = buyers.iter().map(|(u, o)| (u.as_str(), o.as_str())).collect();
    let mark = |id: i64| format!("{id}:{}", 1_700_000_000_000i64 + id);
    let (m900, m101, m102) = (mark(900), mark(101), mark(102));
    assert_eq!(
        marks,
        HashMap::from([("9", m900.as_str()), ("1", m101.as_str()), ("2", m102.as_str())])
    );
    assert_eq!(admitted, 3, "the count of admitted orders: one per accepted order");
    // One outbox entry per call that accepted any order, carrying exactly the
    // call's accepted orders, in the call's order.
    let entries: Vec<Vec<i64>> = outbox
        .ids
        .iter()
        .map(|e| {
            let orders = seckill::outbox::entry::parse(e, 0).expect("an entry reserve.lua wrote");
            assert!(orders.iter().all(|o| o.voucher_id == v));
            orders.iter().map(|o| o.id).collect()
        })
        .collect();
    assert_eq!(entries, vec![vec![900], vec![101, 102]]);
    // A later call: everyone refused, nothing written.
    assert_eq!(call(&mut conn, &keys, v, &[(6, 109)]).await, vec![Value::Int(-1)]);
    // A shard whose stock is not loaded: every order of the call is told so.
    let lost = app.flash_sale(5).await;
    let _: i64 = redis::cmd("DEL")
        .arg(keys.stock(lost))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        call(&mut conn, &keys, lost, &[(1, 201), (2, 202)]).await,
        vec![Value::Int(-3), Value::Int(-3)]
    );
    let marks: i64 = redis::cmd("HLEN")
        .arg(keys.buyers(lost))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(marks, 0, "nothing admitted from a stock that is not there");
    // A stock that is not an integer: an error before any write (Redis does not
    // roll a script back: a write before the error would stay).
    let odd = app.flash_sale(5).await;
    let _: () = redis::cmd("SET")
        .arg(keys.stock(odd))
        .arg("5.0")
        .query_async(&mut conn)
        .await
        .unwrap();
    let s = script();
    let mut inv = s.key(keys.stock_at(odd, 0, 1));
    inv.key(keys.buyers_at(odd, 0, 1))
        .key(keys.admitted_at(odd, 0, 1))
        .key(keys.outbox_at(odd, 0, 1))
        .arg(odd)
        .arg(1)
        .arg(301)
        .arg(1_700_000_000_000i64);
    let refused: redis::RedisResult<Value> = inv.invoke_async(&mut conn).await;
    assert!(refused.is_err(), "{refused:?}");
    let (marks, entries, stock): (i64, i64, String) = redis::pipe()
        .hlen(keys.buyers(odd))
        .cmd("XLEN")
        .arg(keys.outbox(odd))
        .get(keys.stock(odd))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((marks, entries, stock.as_str()), (0, 0, "5.0"), "nothing written");
}

/// Orders of this instance's script calls, and the calls.
async fn batches(app: &TestApp) -> (f64, f64) {
    (
        app.metric("seckill_reserve_lua_batch_orders_sum").await,
        app.metric("seckill_reserve_lua_batch_orders_count").await,
    )
}

/// A crowd in which every shopper sends three orders at once, 64 requests in
/// flight: the calls carry several orders each (the metric shows it), and still
/// exactly the stock is sold, at most one order per shopper, every shopper's other
/// answers `already_ordered` with the order they hold or `sold_out`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crowd_through_coalesced_calls_sells_exactly_the_stock_once_per_shopper() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let stock = 150i64;
    let v = app.flash_sale(stock).await;
    let (sum0, count0) = batches(&app).await;
    let shoppers: Vec<i64> = (1..=400).flat_map(|u| [u, u, u]).collect();
    use futures::StreamExt;
    let answers: Vec<(i64, StatusCode, serde_json::Value)> = futures::stream::iter(shoppers)
        .map(|u| {
            let app = &app;
            async move {
                let (s, b) = app.order(v, u).await;
                (u, s, b)
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let (sum1, count1) = batches(&app).await;
    let (orders, calls) = (sum1 - sum0, count1 - count0);
    println!("coalesced crowd: {orders} orders in {calls} script calls");
    // (After the sell-out the sold-out flag answers without a call.)
    assert!(orders >= stock as f64, "every accepted order went through a call");
    assert!(
        calls < orders,
        "some calls carried several orders: {calls} calls for {orders}"
    );
    let mut held: HashMap<i64, String> = HashMap::new();
    for (u, s, b) in &answers {
        if *s == StatusCode::ACCEPTED {
            let id = b["order_id"].as_str().unwrap().to_owned();
            assert!(held.insert(*u, id).is_none(), "shopper {u} got two 202s");
        }
    }
    assert_eq!(held.len() as i64, stock, "exactly the stock sold");
    for (u, s, b) in &answers {
        match (*s, code(b)) {
            (StatusCode::ACCEPTED, _) => {}
            (StatusCode::CONFLICT, "sold_out") => {}
            (StatusCode::CONFLICT, "already_ordered") => assert_eq!(
                b["error"]["order_id"].as_str(),
                Some(
                    held.get(u)
                        .map(String::as_str)
                        .expect("a shopper told of an order holds one")
                ),
                "shopper {u} is told the order they hold: {b}"
            ),
            other => panic!("shopper {u}: unexpected answer {other:?}: {b}"),
        }
    }
    wait_stored(&app, v, stock, std::time::Duration::from_secs(30), "coalesced crowd").await;
    assert_balanced(&app, v).await;
}
