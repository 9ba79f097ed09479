//! Unit tests of the books: the checks, what unbalances them and the streak of
//! unbalanced rounds.
use super::books::*;
use super::*;
use std::collections::HashSet;

/// A sale of 10 with `cancelled` units returned.
fn sample(
    left: Option<i64>,
    admitted: i64,
    created: i64,
    paid: i64,
    cancelled: i64,
) -> (RedisBooks, InFlight, PostgresBooks) {
    let redis = RedisBooks {
        stock_remaining: left,
        orders_admitted: admitted,
        units_returned: cancelled,
        outbox: 0,
        units_in_transit: 0,
    };
    let in_flight = InFlight {
        orders: admitted - created - paid - cancelled,
        outbox: 0,
        queue_ready: None,
    };
    let postgres = PostgresBooks {
        created,
        paid,
        cancelled,
        failed: 0,
        stock: 10 - created - paid,
        returns_pending: 0,
    };
    (redis, in_flight, postgres)
}

#[test]
fn books_balance_when_every_unit_is_somewhere() {
    // 10 on sale: 6 admitted, 1 of them cancelled (back on sale), 2 in flight.
    let (r, f, p) = sample(Some(5), 6, 2, 1, 1);
    assert_eq!(f.orders, 2);
    assert!(Checks::of(10, &r, &f, &p).all());
}

#[test]
fn each_check_names_what_failed() {
    let (mut r, f, mut p) = sample(Some(5), 6, 2, 1, 1);
    r.stock_remaining = Some(4);
    let c = Checks::of(10, &r, &f, &p);
    assert!(!c.units_accounted_for && c.postgres_stock && c.no_returns_pending);
    r.stock_remaining = None;
    assert!(!Checks::of(10, &r, &f, &p).units_accounted_for);
    r.stock_remaining = Some(5);
    p.stock += 1;
    let c = Checks::of(10, &r, &f, &p);
    assert!(c.units_accounted_for && !c.postgres_stock && c.no_returns_pending);
    p.stock -= 1;
    p.returns_pending = 1;
    let c = Checks::of(10, &r, &f, &p);
    assert!(c.units_accounted_for && c.postgres_stock && !c.no_returns_pending);
    assert!(!c.all());
}

#[test]
fn a_sale_counts_only_when_unbalanced_twice_in_a_row() {
    let mut s = Streak::default();
    assert!(s.observe(HashSet::from([1, 2])).is_empty());
    assert_eq!(s.observe(HashSet::from([2, 3])), HashSet::from([2]));
    assert_eq!(s.observe(HashSet::from([2, 3])), HashSet::from([2, 3]));
    assert!(s.observe(HashSet::new()).is_empty());
    s.observe(HashSet::from([4]));
    s.reset();
    assert!(s.observe(HashSet::from([4])).is_empty());
}

/// Redis went back in time: it lost three admitted orders (and their units are on
/// sale again), Postgres holds them. The units sum balances; the books do not.
#[test]
fn orders_redis_never_admitted_unbalance_the_books() {
    // Persisted: 3 created; Redis rolled back to before them: 10 left, 0 admitted.
    let (r, f, p) = sample(Some(10), 0, 3, 0, 0);
    assert_eq!(f.orders, -3);
    let c = Checks::of(10, &r, &f, &p);
    assert!(c.units_accounted_for && c.postgres_stock, "the sums alone agree: {c:?}");
    assert!(!c.orders_known_to_redis);
    assert!(!c.all());
}

/// A failed order after a repair: Redis was rebuilt from Postgres, so every sum
/// agrees; the incident still shows.
#[test]
fn a_failed_order_unbalances_the_books_also_after_a_repair() {
    // 10 on sale, 2 created, 1 failed; Redis rebuilt: 8 left, 3 admitted.
    let (r, mut f, mut p) = sample(Some(8), 3, 2, 0, 0);
    p.failed = 1;
    f.orders -= 1;
    let c = Checks::of(10, &r, &f, &p);
    assert!(
        c.units_accounted_for && c.postgres_stock && c.orders_known_to_redis,
        "{c:?}"
    );
    assert!(!c.no_failed_orders);
    assert!(!c.all());
}
