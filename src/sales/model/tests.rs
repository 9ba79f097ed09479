//! Unit tests of the validation of a new voucher and of its schema.
use super::*;
use serde_json::{json, Value};

fn base() -> Value {
    json!({"shop_id": "1", "title": "t", "pay_value": 100, "actual_value": 200,
           "stock": 10, "begin_at": "2026-01-01T00:00:00+08:00", "end_at": "2026-01-02T00:00:00Z"})
}

fn field_of(body: Value) -> String {
    let e = NewVoucher::parse(&body).unwrap_err();
    assert!(e.to_string().starts_with(&format!("{}: ", e.field)), "{e}");
    e.field
}

/// The schema's `title` pattern (not blank, no NUL) and `parse` agree on every
/// character of the Basic Multilingual Plane, alone and beside others.
#[test]
fn the_title_pattern_is_the_blank_check() {
    let schema = serde_json::to_value(<NewVoucher as utoipa::PartialSchema>::schema()).unwrap();
    let pattern = schema["allOf"][0]["properties"]["title"]["pattern"].as_str().unwrap();
    let re = regex_lite::Regex::new(pattern).unwrap();
    for c in (0..=0xffffu32).filter_map(char::from_u32) {
        for title in [c.to_string(), format!("a{c}"), format!("{c} ")] {
            let mut b = base();
            b["title"] = json!(title);
            assert_eq!(re.is_match(&title), NewVoucher::parse(&b).is_ok(), "{title:?}");
        }
    }
}

#[test]
fn a_valid_flash_sale_parses() {
    let v = NewVoucher::parse(&base()).unwrap();
    let f = v.flash.unwrap();
    assert_eq!((f.stock, f.stock_shards), (10, 1));
    let mut b = base();
    b["stock_shards"] = json!(64);
    assert_eq!(NewVoucher::parse(&b).unwrap().flash.unwrap().stock_shards, 64);
}

#[test]
fn each_rule_names_its_field() {
    let cases = [
        ("stock", json!(-1)),
        ("stock", json!("ten")),
        ("pay_value", json!(-5)),
        ("actual_value", json!(1.5)),
        ("title", json!("")),
        ("title", json!("x".repeat(256))),
        ("shop_id", json!("0")),
        ("shop_id", json!("99999999999999999999")),
        ("begin_at", json!("yesterday")),
        ("stock_shards", json!(0)),
        ("stock_shards", json!(65)),
        ("stock_shards", json!("x")),
    ];
    for (field, value) in cases {
        let mut b = base();
        b[field] = value;
        assert_eq!(field_of(b), field);
    }
    let mut b = base();
    b["end_at"] = b["begin_at"].clone();
    assert_eq!(field_of(b), "end_at");
    let mut b = base();
    b.as_object_mut().unwrap().remove("stock");
    assert_eq!(field_of(b), "stock");
}
