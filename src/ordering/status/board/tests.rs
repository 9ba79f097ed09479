use super::*;
use crate::ordering::status::announce::{parse, Changed};
use crate::ordering::status::waits::Waiter;

fn order(id: i64, status: &str) -> Order {
    let mut o = Order::pending(id, 7, 3, 0);
    o.status = status.to_owned();
    o
}

fn live() -> Board {
    let b = Board::new(10);
    b.set_live(true);
    b
}

const X: Key = Key::Id { order: 11, owner: 3 };

fn row(id: i64) -> Changed {
    Changed {
        id,
        issued_id: None,
        user: 3,
        voucher: 7,
        order: None,
    }
}

#[test]
fn payloads_parse_and_pings_do_not() {
    let rows = parse(
        r#"{"op": "INSERT", "rows": [[1, null, 3, 7, "created", "SK1", "2026-12-03T12:31:17.748749+00:00", null, null],
            [2, 1002, 4, 7, "paid", null, "2026-12-03T12:31:17+00:00", "2026-12-03T12:31:18+00:00", null]]}"#,
    )
    .expect("parsed");
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (rows[0].id, rows[0].issued_id, rows[0].user, rows[0].voucher),
        (1, None, 3, 7)
    );
    let o = rows[1].order.as_ref().expect("the order as the change left it");
    assert_eq!(
        (o.id.get(), o.status.as_str(), o.paid_at.is_some()),
        (1002, "paid", true)
    );
    let deleted =
        parse(r#"{"op": "DELETE", "rows": [[1, null, 3, 7, "created", null, "2026-12-03T12:31:17Z", null, null]]}"#)
            .expect("parsed");
    assert_eq!(deleted[0].order, None, "a deleted row stands for no answer");
    assert_eq!(parse("ping abc 3"), None);
    assert_eq!(parse(r#"{"op": "INSERT", "rows": [[1, null, 3]]}"#), None);
}

/// A stored order's announcement is its owner's answer at once: the first poll
/// needs no query; one stored under a fresh id (another row shares the id its
/// shopper knows) is only dropped, and so is a shopper's order that is not live.
#[test]
fn an_announced_row_is_the_next_answer() {
    let b = live();
    let stored = parse(
        r#"{"op": "INSERT", "rows": [[11, null, 3, 7, "created", "SK1", "2026-12-03T12:31:17Z", null, null],
            [12, 1012, 4, 7, "created", "SK2", "2026-12-03T12:31:17Z", null, null]]}"#,
    )
    .unwrap();
    b.changed(&stored);
    assert_eq!(b.get(&X).map(|o| o.status), Some("created".to_owned()));
    assert!(b.get(&Key::Mine { voucher: 7, user: 3 }).is_some());
    assert_eq!(
        b.get(&Key::Id { order: 1012, owner: 4 }),
        None,
        "stored under a fresh id"
    );
    assert!(b.get(&Key::Mine { voucher: 7, user: 4 }).is_some());
    let cancelled = parse(r#"{"op": "UPDATE", "rows": [[11, null, 3, 7, "cancelled", "SK1", "2026-12-03T12:31:17Z", null, "2026-12-03T12:31:19Z"]]}"#).unwrap();
    b.changed(&cancelled);
    assert_eq!(b.get(&X).map(|o| o.status), Some("cancelled".to_owned()));
    assert_eq!(
        b.get(&Key::Mine { voucher: 7, user: 3 }),
        None,
        "no live order: Redis may know a new one"
    );
}

#[test]
fn an_answer_kept_is_served_until_its_order_changes() {
    let b = live();
    let t = b.ticket();
    b.keep(t, X, &order(11, "created"));
    assert_eq!(b.get(&X).map(|o| o.status), Some("created".to_owned()));
    b.changed(&[row(12)]);
    assert!(b.get(&X).is_some(), "another order's change");
    b.changed(&[row(11)]);
    assert_eq!(b.get(&X), None, "its own change");
}

/// The race a cache of reads must not lose: the answer was read before a change
/// committed and is kept after its announcement. It must not be served.
#[test]
fn an_answer_read_before_a_change_announced_meanwhile_is_not_kept() {
    let b = live();
    let t = b.ticket();
    b.changed(&[row(11)]);
    b.keep(t, X, &order(11, "created"));
    assert_eq!(b.get(&X), None);
    // A lookup that began after the announcement keeps what it read.
    let t = b.ticket();
    b.keep(t, X, &order(11, "paid"));
    assert_eq!(b.get(&X).map(|o| o.status), Some("paid".to_owned()));
}

#[test]
fn an_issued_id_and_a_shoppers_order_of_a_sale_are_named_too() {
    let b = live();
    let mine = Key::Mine { voucher: 7, user: 3 };
    let by_issued = Key::Id { order: 1002, owner: 3 };
    let t = b.ticket();
    b.keep(t, mine, &order(2, "created"));
    b.keep(t, by_issued, &order(2, "created"));
    b.changed(&[Changed {
        id: 2,
        issued_id: Some(1002),
        user: 3,
        voucher: 7,
        order: None,
    }]);
    assert_eq!(b.get(&mine), None);
    assert_eq!(b.get(&by_issued), None);
}

/// While it may not hear every announcement the board serves nothing, and what
/// it kept before is gone for good (announcements may have been lost meanwhile).
#[test]
fn a_board_that_stops_hearing_serves_nothing_and_forgets() {
    let b = live();
    let t = b.ticket();
    b.keep(t, X, &order(11, "created"));
    b.set_live(false);
    assert_eq!(b.get(&X), None);
    assert!(b.ticket().is_none());
    b.keep(t, X, &order(11, "created"));
    b.set_live(true);
    assert_eq!(b.get(&X), None, "emptied when it stopped hearing");
    b.keep(t, X, &order(11, "created"));
    assert_eq!(b.get(&X), None, "a ticket of before is void");
}

#[tokio::test]
async fn a_change_wakes_the_waiters_of_its_order_only() {
    let b = Arc::new(live());
    {
        let w = Waiter::new(&b, 11);
        let other = Waiter::new(&b, 12);
        assert_eq!(b.waiting(), 2);
        let mut armed = std::pin::pin!(w.notified());
        armed.as_mut().enable();
        let mut not = std::pin::pin!(other.notified());
        not.as_mut().enable();
        b.changed(&[row(11)]);
        let far = tokio::time::Instant::now() + Duration::from_secs(30);
        tokio::time::timeout(Duration::from_secs(5), w.wait(armed, far))
            .await
            .expect("woken by its order's change");
        let short = tokio::time::Instant::now() + Duration::from_millis(50);
        let started = tokio::time::Instant::now();
        other.wait(not, short).await;
        assert!(
            started.elapsed() >= Duration::from_millis(50),
            "not woken by another order's change"
        );
    }
    assert_eq!(b.waiting(), 0);
}

#[tokio::test]
async fn closing_answers_every_waiter_at_once() {
    let b = Arc::new(live());
    let w = Waiter::new(&b, 11);
    let mut armed = std::pin::pin!(w.notified());
    armed.as_mut().enable();
    b.closing.cancel();
    let far = tokio::time::Instant::now() + Duration::from_secs(30);
    tokio::time::timeout(Duration::from_secs(5), w.wait(armed, far))
        .await
        .expect("answered at the close");
}

/// A board whose last ping heard back was sent more than [`MAX_STALE`] ago
/// serves nothing, whatever its listener believes, until a ping is heard again.
#[test]
fn a_board_that_heard_no_ping_lately_serves_nothing() {
    let b = live();
    let t = b.ticket();
    b.keep(t, X, &order(11, "created"));
    assert!(b.get(&X).is_some());
    std::thread::sleep(MAX_STALE + Duration::from_millis(100));
    assert!(!b.is_live());
    assert_eq!(b.get(&X), None);
    b.heard(Instant::now());
    assert!(
        b.get(&X).is_some(),
        "heard again: what it kept stands (no announcement was missed)"
    );
}
