//! Reading [`Settings`] from the environment (or a map): each variable's default,
//! its bounds, and an error that names it.
use super::list::comma_list;
use super::secret::{Secret, DEV_JWT_SECRET, MIN_JWT_SECRET_BYTES};
use super::settings::{Auth, Guards, Http, Pipeline, SaleRules, Services, Settings};
use anyhow::{bail, Context, Result};
use chrono_tz::Tz;
use std::collections::HashMap;
use std::time::Duration;

impl Settings {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads from a map, on top of the defaults (tests).
    pub fn from_map(map: &HashMap<String, String>) -> Result<Self> {
        Self::from_lookup(|k| map.get(k).cloned())
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let var = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let s = Settings {
            services: Services::read(&var)?,
            http: Http::read(&var)?,
            auth: Auth::read(&var)?,
            pipeline: Pipeline::read(&var)?,
            guards: Guards::read(&var)?,
            sales: SaleRules::read(&var)?,
        };
        check_jwks(&s.auth)?;
        Ok(s)
    }
}

/// `SECKILL_JWT_SECRET`, and whether it is the development secret (unset, or set
/// to it by hand).
pub(super) fn jwt_secret(var: &impl Fn(&str) -> Option<String>) -> Result<(Secret, bool)> {
    Ok(match var("SECKILL_JWT_SECRET") {
        // HS256's key is as strong as its length: 32 bytes, the hash's size.
        Some(s) if s.len() < MIN_JWT_SECRET_BYTES => bail!(
            "SECKILL_JWT_SECRET must be at least {MIN_JWT_SECRET_BYTES} bytes, got {} (e.g. openssl rand -hex 32)",
            s.len()
        ),
        // The development secret set by hand is still the published one.
        Some(s) => {
            let dev = s == DEV_JWT_SECRET;
            (Secret::new(s), dev)
        }
        None => (Secret::new(DEV_JWT_SECRET), true),
    })
}

/// `SECKILL_TIME_ZONE`: an IANA zone.
pub(super) fn time_zone(var: &impl Fn(&str) -> Option<String>) -> Result<Tz> {
    let tz_name = var("SECKILL_TIME_ZONE").unwrap_or_else(|| "Asia/Shanghai".into());
    let time_zone: Tz = tz_name
        .parse()
        .map_err(|_| anyhow::anyhow!("SECKILL_TIME_ZONE: unknown IANA zone {tz_name:?}"))?;
    Ok(time_zone)
}

/// `SECKILL_DATABASE_STANDBY_URLS` as given, each listed URL checked to be a
/// Postgres URL.
pub(super) fn standby_urls(var: &impl Fn(&str) -> Option<String>) -> Result<String> {
    let standbys = var("SECKILL_DATABASE_STANDBY_URLS").unwrap_or_default();
    for (i, url) in comma_list(&standbys).iter().enumerate() {
        if url.parse::<sqlx::postgres::PgConnectOptions>().is_err() {
            bail!("SECKILL_DATABASE_STANDBY_URLS: standby {} is not a Postgres URL", i + 1);
        }
    }
    Ok(standbys)
}

/// Checks `SECKILL_JWKS` against the rest: over plain http:// on a loopback address
/// only, and with the issuer and audience its tokens must name.
fn check_jwks(auth: &Auth) -> Result<()> {
    if let Some(url) = auth.jwks.as_deref().and_then(|j| j.strip_prefix("http://")) {
        let host = url.split(['/', '?']).next().unwrap_or_default();
        let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
        if !["127.0.0.1", "localhost", "[::1]"].contains(&host) {
            bail!(
                "SECKILL_JWKS: an identity provider's keys over plain http:// could be replaced on the way; \
                 use https:// (http:// is taken on a loopback address only)"
            );
        }
    }
    if auth.jwks.is_some() && (auth.jwt_issuer.is_none() || auth.jwt_audience.is_none()) {
        bail!(
            "SECKILL_JWKS needs SECKILL_JWT_ISSUER and SECKILL_JWT_AUDIENCE: an identity provider's \
             tokens are taken only for this service's issuer and audience"
        );
    }
    Ok(())
}

/// A secret of its own for one purpose (`key`), as long as HS256's key must be.
pub(super) fn secret(var: &impl Fn(&str) -> Option<String>, key: &str) -> Result<Option<Secret>> {
    match var(key) {
        Some(s) if s.len() < MIN_JWT_SECRET_BYTES => bail!(
            "{key} must be at least {MIN_JWT_SECRET_BYTES} bytes, got {} (e.g. openssl rand -hex 32)",
            s.len()
        ),
        s => Ok(s.map(Secret::new)),
    }
}

/// `SECKILL_TRUSTED_PROXIES`: addresses (a host network) and networks, comma-separated.
pub(super) fn proxies(raw: Option<&str>) -> Result<Vec<ipnet::IpNet>> {
    raw.unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.parse::<ipnet::IpNet>()
                .or_else(|_| p.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| {
                    anyhow::anyhow!("SECKILL_TRUSTED_PROXIES: {p:?} is not an address or a network (10.0.0.0/8)")
                })
        })
        .collect()
}

pub(super) fn num(var: &impl Fn(&str) -> Option<String>, key: &str, default: u64, min: u64, max: u64) -> Result<u64> {
    let Some(raw) = var(key) else {
        return Ok(default);
    };
    let v: u64 = raw
        .trim()
        .parse()
        .with_context(|| format!("{key} must be a whole number, got {raw:?}"))?;
    if !(min..=max).contains(&v) {
        bail!("{key} must be between {min} and {max}, got {v}");
    }
    Ok(v)
}

/// A duration in milliseconds, read as [`num`] reads it.
pub(super) fn millis(
    var: &impl Fn(&str) -> Option<String>,
    key: &str,
    default: u64,
    min: u64,
    max: u64,
) -> Result<Duration> {
    Ok(Duration::from_millis(num(var, key, default, min, max)?))
}

/// A duration in milliseconds that 0 turns off (`None`), read as [`num`] reads it.
pub(super) fn optional_millis(
    var: &impl Fn(&str) -> Option<String>,
    key: &str,
    default: u64,
    min: u64,
    max: u64,
) -> Result<Option<Duration>> {
    Ok(match num(var, key, default, min, max)? {
        0 => None,
        ms => Some(Duration::from_millis(ms)),
    })
}

/// `SECKILL_OUTBOX_FORMAT`: the outbox format to write, at most the newest this
/// build knows.
pub(super) fn outbox_format(var: &impl Fn(&str) -> Option<String>) -> Result<u32> {
    Ok(num(
        var,
        "SECKILL_OUTBOX_FORMAT",
        super::NEWEST_OUTBOX_FORMAT as u64,
        1,
        super::NEWEST_OUTBOX_FORMAT as u64,
    )? as u32)
}

pub(super) fn flag(var: &impl Fn(&str) -> Option<String>, key: &str, default: bool) -> Result<bool> {
    match var(key).map(|v| v.trim().to_ascii_lowercase()) {
        None => Ok(default),
        Some(v) if ["1", "true", "yes", "on"].contains(&v.as_str()) => Ok(true),
        Some(v) if ["0", "false", "no", "off"].contains(&v.as_str()) => Ok(false),
        Some(v) => bail!("{key} must be true or false, got {v:?}"),
    }
}

/// Namespaces prefix Redis keys and AMQP names: keep them to a safe alphabet.
pub(super) fn validate_namespace(ns: &str) -> Result<()> {
    let ok = !ns.is_empty() && ns.len() <= 64 && ns.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !ok {
        bail!("SECKILL_NAMESPACE must be 1-64 characters of [A-Za-z0-9_-], got {ns:?}");
    }
    Ok(())
}

/// Checks an `AMQP_URL`: one or more AMQP URLs, comma-separated. The error
/// names the position of a bad one, never its text (it holds a password).
pub(super) fn check_amqp_urls(list: &str) -> Result<()> {
    let urls = comma_list(list);
    anyhow::ensure!(!urls.is_empty(), "AMQP_URL names no RabbitMQ node");
    for (i, url) in urls.iter().enumerate() {
        if url.parse::<lapin::uri::AMQPUri>().is_err() {
            bail!("AMQP_URL: node {} of {} is not an AMQP URL", i + 1, urls.len());
        }
    }
    Ok(())
}

#[cfg(test)]
mod amqp_tests {
    use super::check_amqp_urls;

    #[test]
    fn a_bad_node_is_named_by_its_place_never_its_text() {
        assert!(check_amqp_urls("amqp://guest:guest@127.0.0.1:5672/%2f").is_ok());
        assert!(check_amqp_urls("amqp://a:1/%2f, amqp://b:2/%2f").is_ok());
        assert!(check_amqp_urls(" , ").is_err());
        let e = check_amqp_urls("amqp://u:secret@a:1/%2f,http://u:secret@b/").unwrap_err();
        assert_eq!(e.to_string(), "AMQP_URL: node 2 of 2 is not an AMQP URL");
    }
}
