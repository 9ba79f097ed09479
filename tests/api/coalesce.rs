//! Coalesced reservations: one call of `lua/reserve.lua` carries every
//! order waiting at a shard's gate, and each shopper gets exactly the answer one
//! call of their own would have given, the stock exact.
use crate::helpers::*;
use redis::Value;
use reqwest::StatusCode;
use std::collections::HashMap;

/// The order script, as the service runs it.
fn script() -> redis::Script {
    redis::Script::new(seckill::ordering::replication::SOURCE)
}

/// The time the tests give order `id`.
fn at(id: i64) -> i64 {
    1_700_000_000_000i64 + id
}

/// Runs the script for `asks` (user, order id) on shard 0 of `v`, with its
/// arguments as the service builds them (the voucher, no points, a fresh write
/// name, the outbox entry of every order, the newest outbox format, each order's
/// user and mark); the orders' replies.
async fn call(
    conn: &mut seckill::redis_conn::Conn,
    keys: &seckill::keys::Keys,
    v: i64,
    asks: &[(i64, i64)],
) -> Vec<Value> {
    let s = script();
    let mut inv = s.key(keys.stock_at(v, 0, 1));
    let entry: Vec<String> = asks
        .iter()
        .map(|(user, id)| format!("{id},{user},{}", at(*id)))
        .collect();
    inv.key(keys.buyers_at(v, 0, 1))
        .key(keys.admitted_at(v, 0, 1))
        .key(keys.outbox_at(v, 0, 1))
        .key(keys.seq_at(v, 0, 1))
        .key(keys.hist_at(v, 0, 1))
        .arg(v)
        .arg("")
        .arg("")
        .arg(seckill::recovery::history::fresh_name().as_slice())
        .arg(entry.join(","))
        .arg(seckill::ordering::outbox::format::NEWEST);
    for (user, id) in asks {
        inv.arg(user).arg(format!("{id}:{}", at(*id)));
    }
    match inv.invoke_async(&mut *conn).await.unwrap() {
        Value::Array(replies) if replies.first() == Some(&Value::Int(1)) => replies[3..].to_vec(),
        // Not loaded (-1) or behind (0): the status alone stands for every order.
        Value::Array(replies) => vec![replies[0].clone()],
        other => panic!("not a status, a sequence and one reply per order: {other:?}"),
    }
}

type Books = (i64, HashMap<String, String>, i64, redis::streams::StreamRangeReply);

/// Shard 0's stock, marks, count of admitted orders and outbox.
async fn books(conn: &mut seckill::redis_conn::Conn, keys: &seckill::keys::Keys, v: i64) -> Books {
    redis::pipe()
        .get(keys.stock_at(v, 0, 1))
        .hgetall(keys.buyers_at(v, 0, 1))
        .get(keys.admitted_at(v, 0, 1))
        .cmd("XRANGE")
        .arg(keys.outbox_at(v, 0, 1))
        .arg("-")
        .arg("+")
        .query_async(conn)
        .await
        .unwrap()
}

/// Each outbox entry's orders: (id, user, created_ms), checking its voucher.
fn entries(v: i64, outbox: &redis::streams::StreamRangeReply) -> Vec<Vec<(i64, i64, i64)>> {
    outbox
        .ids
        .iter()
        .map(|e| {
            let orders = seckill::ordering::outbox::entry::parse(e, seckill::ordering::outbox::format::NEWEST)
                .expect("an entry reserve.lua wrote")
                .orders;
            assert!(orders.iter().all(|o| o.voucher_id == seckill::id::VoucherId::new(v)));
            orders
                .iter()
                .map(|o| (o.id.get(), o.user_id.get(), o.created_ms))
                .collect()
        })
        .collect()
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
    let (stock, buyers, admitted, outbox) = books(&mut conn, &keys, v).await;
    assert_eq!(stock, 0, "three units, three orders");
    // Each mark names the shopper's order and its time.
    let marks: HashMap<&str, &str> = buyers.iter().map(|(u, o)| (u.as_str(), o.as_str())).collect();
    let mark = |id: i64| format!("{id}:{}", at(id));
    let (m900, m101, m102) = (mark(900), mark(101), mark(102));
    assert_eq!(
        marks,
        HashMap::from([("9", m900.as_str()), ("1", m101.as_str()), ("2", m102.as_str())])
    );
    assert_eq!(admitted, 3, "the count of admitted orders: one per accepted order");
    // One outbox entry per call that accepted any order, carrying exactly the
    // call's accepted orders, in the call's order.
    assert_eq!(
        entries(v, &outbox),
        vec![vec![(900, 9, at(900))], vec![(101, 1, at(101)), (102, 2, at(102))]]
    );
    // A later call: everyone refused, nothing written.
    assert_eq!(call(&mut conn, &keys, v, &[(6, 109)]).await, vec![Value::Int(-1)]);
    // A shard whose stock is not loaded: the call says so, for every order.
    let lost = app.flash_sale(5).await;
    let _: i64 = redis::cmd("DEL")
        .arg(keys.stock(lost))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        call(&mut conn, &keys, lost, &[(1, 201), (2, 202)]).await,
        vec![Value::Int(-1)]
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
        .key(keys.seq_at(odd, 0, 1))
        .key(keys.hist_at(odd, 0, 1))
        .arg(odd)
        .arg("")
        .arg("")
        .arg(seckill::recovery::history::fresh_name().as_slice())
        .arg(format!("301,1,{}", at(301)))
        .arg(1)
        .arg(format!("301:{}", at(301)));
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

/// A call whose every order is accepted (distinct shoppers, none holding an order,
/// stock for all) writes its arguments as they are: the marks, one outbox entry
/// with every order, the count. Each condition that fails sends the call the
/// order-by-order way, with the same answers a call of their own would give: the
/// stock short by one, a shopper twice in the call, a shopper who holds an order.
#[tokio::test]
async fn a_call_accepting_every_order_and_each_way_out_of_it() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns).api_only().spawn().await;
    let keys = ns.keys();
    let mut conn = app.redis().await;
    let mark = |id: i64| format!("{id}:{}", at(id));
    let v = app.flash_sale(5).await;
    let replies = call(&mut conn, &keys, v, &[(1, 11), (2, 12), (3, 13)]).await;
    assert_eq!(replies, vec![Value::Int(4), Value::Int(3), Value::Int(2)]);
    // Exactly the units left: still every order.
    let replies = call(&mut conn, &keys, v, &[(4, 14), (5, 15)]).await;
    assert_eq!(replies, vec![Value::Int(1), Value::Int(0)]);
    let (stock, buyers, admitted, outbox) = books(&mut conn, &keys, v).await;
    assert_eq!((stock, admitted), (0, 5));
    let want: HashMap<String, String> = (1..=5).map(|u| (u.to_string(), mark(10 + u))).collect();
    assert_eq!(buyers, want);
    assert_eq!(
        entries(v, &outbox),
        vec![
            vec![(11, 1, at(11)), (12, 2, at(12)), (13, 3, at(13))],
            vec![(14, 4, at(14)), (15, 5, at(15))]
        ]
    );
    // One unit short: the last order is refused, the entry holds the others only.
    let w = app.flash_sale(2).await;
    let replies = call(&mut conn, &keys, w, &[(1, 21), (2, 22), (3, 23)]).await;
    assert_eq!(replies, vec![Value::Int(1), Value::Int(0), Value::Int(-1)]);
    let (stock, buyers, admitted, outbox) = books(&mut conn, &keys, w).await;
    assert_eq!((stock, admitted, buyers.len()), (0, 2, 2));
    assert_eq!(entries(w, &outbox), vec![vec![(21, 1, at(21)), (22, 2, at(22))]]);
    // A shopper twice in one call, stock to spare: told of their first order.
    let x = app.flash_sale(10).await;
    let replies = call(&mut conn, &keys, x, &[(1, 31), (1, 32), (2, 33)]).await;
    assert_eq!(replies, vec![Value::Int(9), already(31), Value::Int(8)]);
    // A shopper who holds an order, among new ones.
    let replies = call(&mut conn, &keys, x, &[(5, 41), (1, 42)]).await;
    assert_eq!(replies, vec![Value::Int(7), already(31)]);
    let (stock, buyers, admitted, outbox) = books(&mut conn, &keys, x).await;
    assert_eq!((stock, admitted), (7, 3));
    let want: HashMap<String, String> = [(1, 31), (2, 33), (5, 41)]
        .into_iter()
        .map(|(u, id)| (u.to_string(), mark(id)))
        .collect();
    assert_eq!(buyers, want);
    assert_eq!(
        entries(x, &outbox),
        vec![vec![(31, 1, at(31)), (33, 2, at(33))], vec![(41, 5, at(41))]]
    );
    app.shutdown().await;
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
    // Alone here a call carries about twelve (453 orders in 38 calls); calls of
    // one order each (the gate not coalescing) would be 450.
    assert!(
        calls * 3.0 <= orders,
        "the calls carried three orders each at least on average: {calls} calls for {orders}"
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
