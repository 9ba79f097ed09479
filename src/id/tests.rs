//! Ids read from JSON and URLs, and the pattern the API document gives them.
use super::*;
use serde_json::json;

#[test]
fn accepts_strings_and_numbers_in_range() {
    assert_eq!(parse_value(&json!("42")), Ok(42));
    assert_eq!(parse_value(&json!(42)), Ok(42));
    assert_eq!(parse_value(&json!("9223372036854775807")), Ok(i64::MAX));
    // JSON Schema's integer: a number without a fractional part.
    assert_eq!(parse_value(&json!(42.0)), Ok(42));
}

#[test]
fn a_whole_number_written_as_a_float_parses_exactly() {
    // Found by schemathesis: without serde_json's float_roundtrip this text
    // parsed beside the whole number and was refused as a fraction.
    let n: serde_json::Number = serde_json::from_str("1952630990409391.0").unwrap();
    assert_eq!(as_whole(&n), Some(1_952_630_990_409_391));
}

/// The document's pattern for ids in URLs and bodies is `parse_str`.
#[test]
fn the_digits_pattern_is_parse_str() {
    let re = regex_lite::Regex::new(&digits_pattern()).unwrap();
    let max = i64::MAX.to_string();
    let mut cases: Vec<String> = vec![
        "0".into(),
        "00".into(),
        "1".into(),
        "01".into(),
        "42".into(),
        max.clone(),
        "9223372036854775808".into(),
        "9999999999999999999".into(),
        "1000000000000000000".into(),
        "0000000000000000001".into(),
        "0000000000000000000".into(),
        "999999999999999999".into(),
        "09223372036854775807".into(),
        "12a".into(),
        "".into(),
        "-1".into(),
        "+1".into(),
    ];
    // Every value one step below and above each digit of i64::MAX.
    for i in 0..max.len() {
        for d in b'0'..=b'9' {
            let mut s = max.clone().into_bytes();
            s[i] = d;
            cases.push(String::from_utf8(s).unwrap());
        }
    }
    for s in &cases {
        assert_eq!(re.is_match(s) && s.len() <= 19, parse_str(s).is_ok(), "{s:?}");
    }
}

#[test]
fn refuses_everything_else() {
    for v in [
        json!("0"),
        json!(0),
        json!(-1),
        json!("-1"),
        json!("9223372036854775808"),
        json!(1.5),
        json!(0.0),
        json!(9.3e18),
        json!(-2.0),
        json!("12a"),
        json!(""),
        json!(null),
        json!(true),
        json!(" 1"),
    ] {
        assert!(parse_value(&v).is_err(), "{v}");
    }
}
