//! The gate's and the replies' rules, without Redis (the script itself is tested
//! against Redis in `tests/api/coalesce.rs`).
use super::*;

#[test]
fn a_drain_that_stops_early_answers_the_waiting_and_opens_the_gate() {
    let gate = Gate {
        voucher: 1,
        keys: Default::default(),
        state: Mutex::new((true, Vec::new())),
    };
    let ask = Ask {
        user_id: 1,
        order_id: 2,
        created_ms: 3,
    };
    let (tx, mut rx) = oneshot::channel();
    gate.state.lock().unwrap().1.push((ask, tx));
    drop(Opener {
        gate: &gate,
        armed: true,
    });
    let answer = rx.try_recv().expect("answered");
    let e = answer.expect_err("an error, not a reservation");
    let redis = e.downcast_ref::<RedisError>().expect("a Redis error");
    assert!(crate::redis_conn::is_transient(redis), "503, not 500: {e:#}");
    let state = gate.state.lock().unwrap();
    assert!(!state.0 && state.1.is_empty(), "the gate is open and empty");
}

#[test]
fn replies_decode_as_one_order_each() {
    assert_eq!(
        decode_reply(Value::Int(3)).unwrap(),
        Reservation::Accepted { stock_left: 3 }
    );
    assert_eq!(decode_reply(Value::Int(-1)).unwrap(), Reservation::SoldOut);
    assert_eq!(decode_reply(Value::Int(-3)).unwrap(), Reservation::NotLoaded);
    let again = Value::Array(vec![Value::Int(-2), Value::BulkString(b"77".to_vec())]);
    assert_eq!(
        decode_reply(again).unwrap(),
        Reservation::AlreadyOrdered { order_id: Some(77) }
    );
    assert!(decode_reply(Value::Nil).is_err());
}

#[test]
fn short_of_replicas_nothing_of_the_call_is_acknowledged() {
    let ids: std::collections::HashSet<i64> = [77, 78].into();
    let short = |d| short_of_replicas(d, 0, &ids, true);
    let not = Reservation::NotReplicated { acked: 0 };
    assert_eq!(short(Reservation::Accepted { stock_left: 1 }), not);
    // Named an order of this call, or sold out after this call took units.
    assert_eq!(short(Reservation::AlreadyOrdered { order_id: Some(77) }), not);
    assert_eq!(short(Reservation::SoldOut), not);
    // An order of an earlier call: the answer stands, as a retry's does.
    assert_eq!(
        short(Reservation::AlreadyOrdered { order_id: Some(5) }),
        Reservation::AlreadyOrdered { order_id: Some(5) }
    );
    assert_eq!(
        short_of_replicas(Reservation::SoldOut, 0, &ids, false),
        Reservation::SoldOut
    );
    assert_eq!(short(Reservation::NotLoaded), Reservation::NotLoaded);
}
