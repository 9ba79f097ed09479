use super::*;

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
