//! A repair's books: shoppers with two admitted orders, and more in flight than stock.
use super::{Books, Known, Stored};
use chrono::{TimeZone, Utc};

fn stored(id: i64, user_id: i64, status: &str) -> Stored {
    Stored {
        id,
        issued_id: None,
        user_id,
        created_at: Utc.timestamp_millis_opt(1_000 + id).unwrap(),
        status: status.to_owned(),
    }
}

fn known(id: i64, user_id: i64) -> Known {
    Known {
        id,
        user_id,
        created_ms: 2_000 + id,
    }
}

fn books(pg_stock: i64, stored: Vec<Stored>, in_flight: Vec<Known>) -> Books {
    Books {
        pg_stock,
        stored,
        in_flight,
        requeue: Vec::new(),
        rescued: Vec::new(),
        topups: Vec::new(),
        held_back: 0,
        unnamed: 0,
    }
}

/// A shopper with a live order in Postgres and another in flight is the
/// repair's `repair_two_orders` incident, counted once per extra order; a
/// cancelled order and another shopper's are not.
#[test]
fn a_shopper_with_two_admitted_orders_is_counted() {
    let b = books(
        10,
        vec![stored(1, 7, "created"), stored(2, 8, "cancelled"), stored(3, 9, "paid")],
        vec![known(4, 7), known(5, 8), known(6, 10)],
    );
    for shards in [1, 4] {
        let (by_shard, twice) = b.shards(1, shards);
        assert_eq!(twice, 1, "{shards} shards");
        let admitted: i64 = by_shard.iter().map(|s| s.admitted).sum();
        assert_eq!(admitted, 6, "every order admitted once, {shards} shards");
        let marks: usize = by_shard.iter().map(|s| s.marks.len()).sum();
        assert_eq!(marks, 4, "one mark per shopper (7, 8, 9, 10), {shards} shards");
    }
    let (_, twice) = books(10, vec![stored(1, 7, "created")], vec![known(4, 8)]).shards(1, 1);
    assert_eq!(twice, 0);
}

/// More orders in flight than Postgres's stock is the `repair_over_stock`
/// incident; the repair then puts nothing on sale.
#[test]
fn more_in_flight_than_stock_is_over_stock() {
    let exact = books(2, Vec::new(), vec![known(1, 1), known(2, 2)]);
    assert_eq!((exact.over_stock(), exact.stock_left()), (None, 0));
    let mut over = books(2, Vec::new(), vec![known(1, 1), known(2, 2), known(3, 3)]);
    assert_eq!((over.over_stock(), over.stock_left()), (Some(1), 0));
    over.unnamed = 2;
    assert_eq!(over.over_stock(), Some(3), "unnamed orders count too");
    let under = books(5, Vec::new(), vec![known(1, 1)]);
    assert_eq!((under.over_stock(), under.stock_left()), (None, 4));
}
