//! Order status without Redis: a shopper's mark read back as its order and time.
use super::*;

#[test]
fn a_mark_names_its_order_and_time() {
    assert_eq!(parse_mark("123:1700000000123"), Some((123, 1_700_000_000_123)));
    let id = 5i64 << 32 | 7;
    let second = id_worker::created_at(id).unwrap().timestamp_millis();
    assert_eq!(
        parse_mark(&id.to_string()),
        Some((id, second)),
        "an older mark: the id's second"
    );
    assert_eq!(parse_mark("12:x"), None);
    assert_eq!(parse_mark("x"), None);
}
