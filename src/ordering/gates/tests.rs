//! The gate's and the replies' rules, without Redis (the script itself is tested
//! against Redis in `tests/api/coalesce.rs`).
use super::*;
use crate::recovery::history::ShardHistory;

#[test]
fn a_drain_that_stops_early_answers_the_waiting_and_opens_the_gate() {
    let gate = Gate {
        voucher: 1,
        tag: "v1".into(),
        keys: Default::default(),
        history: Default::default(),
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

/// The script writes the call's entry (ARGV[5]) and marks as they are when it
/// accepts every order: both must name the same orders, in the call's order, as
/// the relay reads the entry back.
#[test]
fn the_calls_entry_and_marks_name_the_same_orders() {
    let asks: Vec<Ask> = (0..3)
        .map(|i| Ask {
            user_id: 10 + i,
            order_id: 392_993_493_313_650_689 + i,
            created_ms: 1_764_000_000_000 + i,
        })
        .collect();
    let history = std::sync::Arc::new(ShardHistory::default());
    history.passed(&history.snapshot(), 42, Some([4; 8]));
    let call = Call::on(history);
    let args = script_args(7, &call, 2, &asks);
    assert_eq!(args.len(), 6 + 2 * asks.len());
    let text = |a: &Vec<u8>| String::from_utf8(a.clone()).unwrap();
    assert_eq!(
        (text(&args[0]), text(&args[1]), text(&args[5])),
        ("7".into(), "42".into(), "2".into())
    );
    assert_eq!(
        (args[2].as_slice(), args[3].as_slice()),
        (&[4u8; 8][..], &call.name[..])
    );
    let entry = redis::streams::StreamId {
        id: "1-0".into(),
        map: [
            ("v".to_owned(), redis::Value::BulkString(args[0].clone())),
            ("b".to_owned(), redis::Value::BulkString(args[4].clone())),
            ("f".to_owned(), redis::Value::BulkString(args[5].clone())),
            ("h".to_owned(), redis::Value::BulkString(args[3].clone())),
        ]
        .into(),
        ..Default::default()
    };
    let parsed = crate::ordering::outbox::entry::parse(&entry, crate::ordering::outbox::format::NEWEST)
        .expect("an entry the relay reads");
    assert_eq!(parsed.name, Some(call.name), "the entry names the call's write");
    let read = parsed.orders;
    for (i, a) in asks.iter().enumerate() {
        let o = &read[i];
        assert_eq!(
            (o.id.get(), o.user_id.get(), o.voucher_id.get(), o.created_ms),
            (a.order_id, a.user_id, 7, a.created_ms)
        );
        assert_eq!(text(&args[6 + 2 * i]), a.user_id.to_string());
        assert_eq!(text(&args[7 + 2 * i]), format!("{}:{}", a.order_id, a.created_ms));
    }
    assert_eq!(read.len(), asks.len());
}

#[test]
fn a_reply_splits_into_status_sequence_and_orders() {
    let reply = Value::Array(vec![
        Value::Int(1),
        Value::Int(9),
        Value::Int(1),
        Value::Int(3),
        Value::Int(-1),
    ]);
    let r = split_reply(reply).unwrap();
    assert_eq!((r.status, r.seq, r.wrote, r.replies.len()), (1, 9, true, 2));
    let behind = Value::Array(vec![Value::Int(0), Value::Int(5), Value::Int(0)]);
    assert_eq!(split_reply(behind).unwrap().status, 0);
    assert!(split_reply(Value::Array(vec![Value::Int(1), Value::Int(2)])).is_err());
    assert!(split_reply(Value::Nil).is_err());
}
