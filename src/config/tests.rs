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
    assert_eq!(s.http.http_addr, "127.0.0.1:8080");
    assert_eq!(s.services.namespace, "seckill");
    assert_eq!(s.sales.time_zone, chrono_tz::Asia::Shanghai);
    assert_eq!(s.sales.payment_window, Duration::from_secs(900));
    assert!(s.auth.jwt_secret_is_dev);
    assert!(s.services.migrate_on_start);
    assert_eq!(s.guards.max_clock_skew, Some(Duration::from_secs(2)));
    assert_eq!(s.http.metrics_render_every, Duration::from_secs(1));
    assert_eq!(
        with(&[("SECKILL_MAX_CLOCK_SKEW_MS", "0")])
            .unwrap()
            .guards
            .max_clock_skew,
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
        ("SECKILL_ADMIN_JWT_SECRET", "short"),
        ("SECKILL_ADMISSION_SECRET", "short"),
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
    let s = with(&[
        ("SECKILL_JWT_SECRET", "a-very-secret-value-123-0123456789"),
        ("SECKILL_ADMIN_JWT_SECRET", "an-admin-secret-value-0123456789ab"),
        ("SECKILL_ADMISSION_SECRET", "an-admission-secret-0123456789abcd"),
    ])
    .unwrap();
    let shown = format!("{s:?}");
    for secret in ["a-very-secret", "an-admin-secret", "an-admission-secret"] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
}

/// An identity provider's keys are taken only with the service's issuer and
/// audience named: a token of that provider for another service must not order.
#[test]
fn a_jwks_needs_an_issuer_and_an_audience() {
    let jwks = ("SECKILL_JWKS", "https://id.example/.well-known/jwks.json");
    for missing in [
        vec![jwks],
        vec![jwks, ("SECKILL_JWT_ISSUER", "https://id.example")],
        vec![jwks, ("SECKILL_JWT_AUDIENCE", "seckill")],
    ] {
        let err = with(&missing).unwrap_err().to_string();
        assert!(err.contains("SECKILL_JWKS needs"), "{err}");
    }
    let s = with(&[
        jwks,
        ("SECKILL_JWT_ISSUER", "https://id.example"),
        ("SECKILL_JWT_AUDIENCE", "seckill"),
    ])
    .unwrap();
    assert_eq!(s.auth.jwks.as_deref(), Some(jwks.1));
    let over = |url: &'static str| {
        with(&[
            ("SECKILL_JWKS", url),
            ("SECKILL_JWT_ISSUER", "https://id.example"),
            ("SECKILL_JWT_AUDIENCE", "seckill"),
        ])
    };
    assert!(over("http://id.example/jwks.json").is_err(), "plain http off loopback");
    assert!(over("http://127.0.0.1:8081/jwks.json").is_ok());
    assert!(over("http://localhost/jwks.json").is_ok());
    assert!(over("/etc/seckill/jwks.json").is_ok(), "a file");
}

/// Trusted proxies are addresses or networks; anything else stops the start.
#[test]
fn trusted_proxies_are_addresses_or_networks() {
    let s = with(&[("SECKILL_TRUSTED_PROXIES", "10.0.0.0/8, 192.0.2.1,::1")]).unwrap();
    assert_eq!(s.http.trusted_proxies.len(), 3);
    assert!(s.http.trusted_proxies[1].contains(&"192.0.2.1".parse::<std::net::IpAddr>().unwrap()));
    assert!(with(&[]).unwrap().http.trusted_proxies.is_empty());
    let err = with(&[("SECKILL_TRUSTED_PROXIES", "10.0.0.0/8,proxy.local")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("proxy.local"), "{err}");
}

/// docs/CONFIGURATION.md names every variable the settings read, and no other
/// (but `RUST_LOG`, read by the log filter).
#[test]
fn the_configuration_page_lists_every_setting_read() {
    use std::collections::BTreeSet;
    let asked = std::cell::RefCell::new(BTreeSet::new());
    Settings::from_lookup(|k| {
        asked.borrow_mut().insert(k.to_string());
        None
    })
    .unwrap();
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/CONFIGURATION.md")).unwrap();
    let documented: BTreeSet<String> = page
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .flat_map(|row| {
            let first_cell = row.split(" | ").next().unwrap_or_default();
            format!("`{first_cell}")
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    let asked = asked.into_inner();
    let undocumented: Vec<_> = asked.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "read but not in docs/CONFIGURATION.md: {undocumented:?}"
    );
    let unread: Vec<_> = documented.difference(&asked).filter(|v| *v != "RUST_LOG").collect();
    assert!(unread.is_empty(), "in docs/CONFIGURATION.md but never read: {unread:?}");
}
