use super::shard::MAX_UNCHECKED;
use super::*;

fn p(seq: i64, n: u8) -> Point {
    Point { seq, name: [n; 8] }
}

#[test]
fn a_write_on_the_head_becomes_the_head() {
    let h = ShardHistory::default();
    assert!(h.snapshot().points.is_empty());
    h.passed(&h.snapshot(), 1, Some([1; 8]));
    assert_eq!(h.head(), Some(p(1, 1)));
    let snap = h.snapshot();
    assert_eq!(snap.points, vec![p(1, 1)]);
    h.passed(&snap, 2, Some([2; 8]));
    assert_eq!(h.snapshot().points, vec![p(2, 2)]);
}

/// Two calls that took the same head, each writing: the second to come back
/// cannot tell whether its write follows the first's (Redis may have gone back
/// between them), so its point waits to be checked by the next call.
#[test]
fn concurrent_writes_keep_both_points_until_one_call_checks_them() {
    let h = ShardHistory::default();
    h.passed(&h.snapshot(), 5, Some([5; 8]));
    let a = h.snapshot();
    let b = h.snapshot();
    h.passed(&a, 6, Some([6; 8]));
    h.passed(&b, 7, Some([7; 8]));
    assert_eq!(h.snapshot().points, vec![p(6, 6), p(7, 7)]);
    // A call that checked both: its write follows both.
    let c = h.snapshot();
    h.passed(&c, 8, Some([8; 8]));
    assert_eq!(h.snapshot().points, vec![p(8, 8)]);
}

/// A call that wrote nothing but checked every point: the latest of them stands
/// for the rest.
#[test]
fn a_check_without_a_write_keeps_the_latest_point() {
    let h = ShardHistory::default();
    h.passed(&h.snapshot(), 3, Some([3; 8]));
    assert!(h.learn(p(9, 9)));
    assert!(!h.learn(p(9, 9)), "a point learnt twice is checked once");
    let snap = h.snapshot();
    assert_eq!(snap.points, vec![p(3, 3), p(9, 9)]);
    h.passed(&snap, 12, None);
    assert_eq!(h.snapshot().points, vec![p(9, 9)]);
}

/// Points of an older generation are moot once the shard is in a newer one.
#[test]
fn a_newer_generation_drops_older_points() {
    let h = ShardHistory::default();
    h.passed(&h.snapshot(), 4, Some([4; 8]));
    h.learn(p(6, 6));
    assert!(h.raise_gen(2).is_empty(), "no order logged");
    assert_eq!(h.snapshot().points, vec![Point::gen_start(2)]);
    assert!(!h.learn(p(7, 7)), "a point before the generation is nothing to check");
    // A call that met a generation newer than every point it passed.
    let snap = h.snapshot();
    h.passed(&snap, 3 * GEN + 2, None);
    assert_eq!(h.head(), Some(Point::gen_start(3)));
}

#[test]
fn the_scripts_arguments_list_the_points_in_order() {
    let snap = Snapshot {
        points: vec![p(1, 1), Point::count(2 * GEN)],
    };
    assert_eq!(snap.seqs(), format!("1,{}", 2 * GEN));
    assert_eq!(snap.names(), [[1u8; 8], [0; 8]].concat());
    assert_eq!(snap.latest(), Some(Point::count(2 * GEN)));
    assert_eq!(Point::from_parts(4, Some(&[7; 8])), p(4, 7));
    assert_eq!(Point::from_parts(4, Some(&[7; 3])), Point::count(4));
    assert_ne!(fresh_name(), NO_NAME);
    assert_eq!(gen_of(3 * GEN + 7), 3);
}

#[test]
fn unchecked_points_are_bounded() {
    let h = ShardHistory::default();
    h.passed(&h.snapshot(), 1, Some([1; 8]));
    for i in 0..(MAX_UNCHECKED as i64 + 10) {
        h.learn(Point {
            seq: 10 + i,
            name: (i as u64 + 1).to_be_bytes(),
        });
    }
    let snap = h.snapshot();
    assert_eq!(snap.points.len(), 1 + MAX_UNCHECKED);
    assert!(snap.points[1..].iter().all(|p| p.seq >= 20), "the earliest go first");
}

fn order(id: i64, gen: i64) -> crate::ordering::OrderMsg {
    crate::ordering::OrderMsg {
        id: crate::id::OrderId::new(id),
        user_id: crate::id::UserId::new(id),
        voucher_id: crate::id::VoucherId::new(1),
        created_ms: 0,
        epoch: gen,
    }
}

fn ids(orders: Vec<crate::ordering::OrderMsg>) -> Vec<i64> {
    orders.iter().map(|o| o.id.get()).collect()
}

/// A write of a newer generation hands out the log's orders of the older one.
#[test]
fn a_write_of_a_newer_generation_hands_out_the_older_orders() {
    let h = ShardHistory::default();
    assert!(h.remember(GEN + 1, [order(1, 1), order(2, 1)]).is_empty());
    assert!(h.remember(GEN + 2, [order(3, 1)]).is_empty());
    assert_eq!(ids(h.remember(2 * GEN + 1, [order(4, 2)])), vec![1, 2, 3]);
    assert_eq!(h.logged(), 1);
}

/// A call that comes back after this process learnt of a repair (its reply was
/// out while the sale was rebuilt): its orders are handed out at once, not kept
/// in a log that only a later call of the new generation would empty.
#[test]
fn orders_of_a_call_older_than_a_known_repair_are_handed_out_at_once() {
    let h = ShardHistory::default();
    assert!(h.remember(GEN + 1, [order(1, 1)]).is_empty());
    h.passed(&h.snapshot(), 2 * GEN + 1, Some([9; 8]));
    assert_eq!(ids(h.remember(GEN + 2, [order(2, 1)])), vec![1, 2]);
    assert_eq!(h.logged(), 0);
    // And once the log is of the newer generation, an older call's orders alone.
    assert!(h.remember(2 * GEN + 1, [order(3, 2)]).is_empty());
    assert_eq!(ids(h.remember(GEN + 3, [order(4, 1)])), vec![4]);
    assert_eq!(h.logged(), 1);
}

/// Learning of a newer generation (a repair, by Postgres) hands out the log's
/// older orders even if no call of this process follows on the shard.
#[test]
fn a_newer_generation_learnt_hands_out_the_older_orders() {
    let h = ShardHistory::default();
    assert!(h.remember(GEN + 1, [order(1, 1)]).is_empty());
    assert!(h.raise_gen(1).is_empty(), "the same generation");
    assert_eq!(ids(h.raise_gen(2)), vec![1]);
    assert_eq!(h.logged(), 0);
}
