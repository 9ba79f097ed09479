//! Unit tests of the cache's entries: the sold-out flag, its renewal and probe,
//! generations, and what a reload keeps.
use super::sold_out::{flagged_at, stamp, FLAG, GEN_SHIFT, TTL_MS};
use super::*;
use crate::sales::model::Voucher;
use std::sync::atomic::Ordering;
use std::time::Duration;

fn entry() -> Entry {
    Entry::new(Voucher {
        id: 1,
        shop_id: 1,
        title: "flash".into(),
        sub_title: None,
        rules: None,
        pay_value: 100,
        actual_value: 1000,
        flash: None,
        paused: false,
        created_at: chrono::Utc::now(),
    })
}

fn at(ms: u64) -> impl FnOnce() -> u64 {
    move || ms
}

#[test]
fn a_flag_is_trusted_for_its_ttl_then_one_request_asks_redis() {
    let e = entry();
    let (sold_out, seen) = e.read_sold_out_flag_at(at(5_000));
    assert!(!sold_out);
    e.mark_sold_out_at(seen, 5_000);
    assert!(e.read_sold_out_flag_at(at(5_000)).0);
    assert!(e.read_sold_out_flag_at(at(5_000 + TTL_MS - 1)).0);

    // Expired: the first request probes, the others are still refused.
    let (sold_out, probe) = e.read_sold_out_flag_at(at(5_000 + TTL_MS));
    assert!(!sold_out, "the probe goes to Redis");
    assert!(e.read_sold_out_flag_at(at(5_000 + TTL_MS)).0, "while the probe is out");
    assert!(e.read_sold_out_flag_at(at(5_000 + 2 * TTL_MS - 1)).0);

    // Redis still says sold out: trusted for another TTL from the answer.
    e.mark_sold_out_at(probe, 5_000 + TTL_MS + 3);
    assert!(e.read_sold_out_flag_at(at(5_000 + 2 * TTL_MS + 2)).0);
    let (sold_out, _) = e.read_sold_out_flag_at(at(5_000 + 2 * TTL_MS + 3));
    assert!(!sold_out, "the next probe");
}

/// A request that read an expired flag, then stalled past another request's probe
/// and past that probe's renewal's TTL too (its clock read late), is the one probe
/// of that expired renewal: it re-stamps the flag, so the requests after it are
/// refused. It used to go to Redis without re-stamping, beside the next probe.
#[test]
fn a_request_that_stalled_past_a_renewal_is_its_one_probe() {
    let e = entry();
    let (_, seen) = e.read_sold_out_flag_at(at(5_000));
    e.mark_sold_out_at(seen, 5_000);
    let (sold_out, _) = e.read_sold_out_flag_at(|| {
        // While this request stalls: another probes, and Redis renews the flag.
        let (sold_out, probe) = e.read_sold_out_flag_at(at(5_000 + TTL_MS));
        assert!(!sold_out);
        e.mark_sold_out_at(probe, 5_001 + TTL_MS);
        5_001 + 2 * TTL_MS
    });
    assert!(!sold_out, "the renewal ran out too: this request probes");
    assert!(
        e.read_sold_out_flag_at(at(5_001 + 2 * TTL_MS)).0,
        "and no other request with it"
    );
}

#[test]
fn a_probe_that_finds_stock_clears_the_flag_and_a_late_sold_out_cannot_set_it() {
    let e = entry();
    let (_, before) = e.read_sold_out_flag_at(at(0));
    let (_, late) = e.read_sold_out_flag_at(at(0)); // its Redis answer ("sold out") comes late
    e.mark_sold_out_at(before, 10);
    let (sold_out, probe) = e.read_sold_out_flag_at(at(10 + TTL_MS));
    assert!(!sold_out);
    e.in_stock(probe);
    assert!(!e.read_sold_out_flag_at(at(10 + TTL_MS)).0, "cleared");
    e.mark_sold_out_at(late, 10 + TTL_MS);
    assert!(
        !e.read_sold_out_flag_at(at(10 + TTL_MS)).0,
        "an answer from before the clear"
    );
    // A new answer sets it again.
    let (_, seen) = e.read_sold_out_flag_at(at(20 + TTL_MS));
    e.mark_sold_out_at(seen, 20 + TTL_MS);
    assert!(e.read_sold_out_flag_at(at(20 + TTL_MS)).0);
}

#[test]
fn only_a_probe_clears_on_an_accepted_order() {
    let e = entry();
    let (_, early) = e.read_sold_out_flag_at(at(0)); // accepted, but reported after the flag
    let (_, other) = e.read_sold_out_flag_at(at(0));
    e.mark_sold_out_at(other, 1);
    e.in_stock(early);
    assert!(
        e.read_sold_out_flag_at(at(2)).0,
        "an answer from before the flag leaves it"
    );
}

#[test]
fn a_stock_event_clears_the_flag_and_a_late_sold_out_cannot_set_it() {
    let e = entry();
    let (_, seen) = e.read_sold_out_flag_at(at(0));
    let (_, late) = e.read_sold_out_flag_at(at(0));
    e.mark_sold_out_at(seen, 0);
    assert!(e.read_sold_out_flag_at(at(1)).0);
    e.stock_returned();
    assert!(!e.read_sold_out_flag_at(at(1)).0);
    e.mark_sold_out_at(late, 2);
    assert!(!e.read_sold_out_flag_at(at(3)).0);
    // A probe that raced with the event cannot set the flag either.
    let (_, seen) = e.read_sold_out_flag_at(at(3));
    e.mark_sold_out_at(seen, 3);
    let (_, probe) = e.read_sold_out_flag_at(at(3 + TTL_MS));
    e.stock_returned();
    e.mark_sold_out_at(probe, 4 + TTL_MS);
    assert!(!e.read_sold_out_flag_at(at(4 + TTL_MS)).0);
}

#[test]
fn the_clock_is_not_read_unless_the_flag_is_set() {
    let e = entry();
    let (sold_out, _) = e.read_sold_out_flag_at(|| panic!("clock read on the clear path"));
    assert!(!sold_out);
}

#[test]
fn the_generation_wraps_without_touching_flag_or_stamp() {
    let e = entry();
    e.state.store(u64::MAX, Ordering::Relaxed);
    e.stock_returned();
    assert_eq!(e.state.load(Ordering::Relaxed), 0);
    let s = flagged_at(0, (1 << 40) + 7);
    assert_eq!(
        (s >> GEN_SHIFT, stamp(s), s & FLAG),
        (0, 7, 1),
        "the stamp stays in its bits"
    );
}

fn voucher(id: i64, paused: bool) -> Voucher {
    Voucher {
        id,
        paused,
        ..entry().voucher
    }
}

/// A reload installs what it read from Postgres, but what was put while it read
/// (a voucher created or paused meanwhile) is newer and stays as it was put.
#[test]
fn a_reload_keeps_what_was_put_while_it_read_postgres() {
    let cache = VoucherCache::default();
    cache.put(voucher(1, false));
    cache.put(voucher(2, false));
    let read_at = cache.puts.load(Ordering::Acquire);
    // Meanwhile: voucher 3 is created, voucher 2 paused.
    cache.put(voucher(3, false));
    cache.put(voucher(2, true));
    // The read saw neither.
    let n = cache.install(vec![voucher(1, false), voucher(2, false)], read_at, false);
    assert_eq!(n, 3);
    assert!(cache.get(3).is_some(), "a voucher created during the reload stays");
    assert!(cache.get(2).unwrap().voucher.paused, "a newer put is not undone");
    // The next reload, which reads after those puts, is the truth again.
    let read_at = cache.puts.load(Ordering::Acquire);
    cache.install(vec![voucher(1, false), voucher(2, false)], read_at, false);
    assert!(cache.get(3).is_none());
    assert!(!cache.get(2).unwrap().voucher.paused);
}

/// A missing id is remembered only if no voucher was put while Postgres was read
/// (that put may be the very voucher), is forgotten when it is put, and a reload
/// forgets those it reads (events may have been lost) and keeps the others.
#[test]
fn a_missing_id_never_hides_a_voucher_put_during_or_after_the_read() {
    let cache = VoucherCache::new(Duration::from_secs(600));
    let marker = cache.read_marker();
    cache.note_missing(7, marker);
    assert!(cache.known_missing(7));
    cache.put(voucher(7, false));
    assert!(!cache.known_missing(7), "a put forgets it");

    let marker = cache.read_marker();
    // Voucher 8 is put while its read was on its way to Postgres.
    cache.put(voucher(8, false));
    cache.note_missing(8, marker);
    cache.note_missing(9, marker);
    assert!(
        !cache.known_missing(8) && !cache.known_missing(9),
        "a read older than a put"
    );

    cache.note_missing(10, cache.read_marker());
    cache.note_missing(11, cache.read_marker());
    assert!(cache.known_missing(10) && cache.known_missing(11));
    cache.install(vec![voucher(10, false)], cache.read_marker(), false);
    assert!(
        !cache.known_missing(10) && cache.get(10).is_some(),
        "a reload that reads it shows it"
    );
    assert!(cache.known_missing(11), "a reload keeps the ids it did not read");
    assert!(!VoucherCache::default().known_missing(1));
}

/// A reload that reads a changed row (its Postgres stock fell as orders persisted)
/// keeps the sale's sold-out flag: a sold-out crowd is not let through to Redis by
/// a reload; with `clear_flags` it is cleared as before.
#[test]
fn a_reload_of_a_changed_row_keeps_the_sold_out_flag() {
    let cache = VoucherCache::default();
    cache.put(voucher(1, false));
    let e = cache.get(1).unwrap();
    let (_, seen) = e.read_sold_out_flag();
    e.mark_sold_out(seen);
    assert!(cache.get(1).unwrap().read_sold_out_flag().0);
    let mut changed = voucher(1, false);
    changed.title = "changed".into();
    cache.install(vec![changed.clone()], cache.read_marker(), false);
    assert_eq!(cache.get(1).unwrap().voucher.title, "changed");
    assert!(cache.get(1).unwrap().read_sold_out_flag().0, "the flag survives");
    changed.title = "again".into();
    cache.install(vec![changed], cache.read_marker(), true);
    assert!(!cache.get(1).unwrap().read_sold_out_flag().0, "cleared when asked");
}
