//! Unit tests of reading and checking the settings.
use super::*;
use anyhow::Result;
use std::time::Duration;

fn with(pairs: &[(&str, &str)]) -> Result<Settings> {
    let map = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Settings::from_map(&map)
}

#[test]
fn defaults_match_the_contract() {
    let s = with(&[]).unwrap();
    assert_eq!(s.http_addr, "127.0.0.1:8080");
    assert_eq!(s.namespace, "seckill");
    assert_eq!(s.time_zone, chrono_tz::Asia::Shanghai);
    assert_eq!(s.payment_window, Duration::from_secs(900));
    assert!(s.jwt_secret_is_dev);
    assert!(s.migrate_on_start);
    assert_eq!(s.max_clock_skew, Some(Duration::from_secs(2)));
    assert_eq!(
        with(&[("SECKILL_MAX_CLOCK_SKEW_MS", "0")]).unwrap().max_clock_skew,
        None
    );
}

#[test]
fn bad_values_are_refused_with_the_variable_named() {
    for (k, v) in [
        ("SECKILL_TIME_ZONE", "Mars/Olympus"),
        ("SECKILL_NAMESPACE", "a b"),
        ("SECKILL_PAYMENT_WINDOW_SECS", "soon"),
        ("SECKILL_JWT_SECRET", "short"),
        ("SECKILL_MIGRATE_ON_START", "maybe"),
        ("SECKILL_MAX_CLOCK_SKEW_MS", "-1"),
        ("SECKILL_JWT_MAX_TTL_SECS", "10"),
    ] {
        let err = with(&[(k, v)]).unwrap_err().to_string();
        assert!(err.contains(k), "{err}");
    }
}

#[test]
fn the_development_secret_serves_loopback_only() {
    assert!(with(&[]).unwrap().check_bind().is_ok());
    assert!(with(&[("SECKILL_HTTP_ADDR", "[::1]:0")]).unwrap().check_bind().is_ok());
    for addr in ["0.0.0.0:8080", "[::]:8080", "10.1.2.3:8080"] {
        let err = with(&[("SECKILL_HTTP_ADDR", addr)])
            .unwrap()
            .check_bind()
            .unwrap_err()
            .to_string();
        assert!(err.contains("SECKILL_JWT_SECRET"), "{err}");
    }
    let s = with(&[
        ("SECKILL_HTTP_ADDR", "0.0.0.0:8080"),
        ("SECKILL_JWT_SECRET", &"k".repeat(32)),
    ])
    .unwrap();
    assert!(s.check_bind().is_ok());
    let err = with(&[("SECKILL_JWT_SECRET", &"k".repeat(31))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("at least 32 bytes"), "{err}");
}

#[test]
fn secrets_do_not_show_in_debug() {
    let s = with(&[("SECKILL_JWT_SECRET", "a-very-secret-value-123-0123456789")]).unwrap();
    assert!(!format!("{s:?}").contains("a-very-secret"));
}
