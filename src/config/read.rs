//! Reading [`Settings`] from the environment (or a map): each variable's default,
//! its bounds, and an error that names it.
use super::list::comma_list;
use super::secret::{Secret, DEV_JWT_SECRET, MIN_JWT_SECRET_BYTES};
use super::settings::{Settings, DEFAULT_JWT_MAX_TTL_SECS};
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
        let (jwt_secret, jwt_secret_is_dev) = jwt_secret(&var)?;
        let namespace = var("SECKILL_NAMESPACE").unwrap_or_else(|| "seckill".into());
        validate_namespace(&namespace)?;
        let time_zone = time_zone(&var)?;
        let standbys = standby_urls(&var)?;
        let amqp_url = var("AMQP_URL").unwrap_or_else(|| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
        check_amqp_urls(&amqp_url)?;
        let s = Settings {
            http_addr: var("SECKILL_HTTP_ADDR").unwrap_or_else(|| "127.0.0.1:8080".into()),
            database_url: Secret::new(
                var("DATABASE_URL").unwrap_or_else(|| "postgres://root@127.0.0.1:5432/seckill".into()),
            ),
            database_standby_urls: Secret::new(standbys),
            redis_url: Secret::new(var("REDIS_URL").unwrap_or_else(|| "redis://127.0.0.1:6379".into())),
            redis_cluster: flag(&var, "SECKILL_REDIS_CLUSTER", false)?,
            redis_wait_replicas: num(&var, "SECKILL_REDIS_WAIT_REPLICAS", 0, 0, 16)? as u32,
            redis_wait_timeout: millis(&var, "SECKILL_REDIS_WAIT_TIMEOUT_MS", 200, 1, 60_000)?,
            amqp_url: Secret::new(amqp_url),
            namespace,
            jwt_secret,
            jwt_secret_is_dev,
            jwt_max_ttl_secs: num(
                &var,
                "SECKILL_JWT_MAX_TTL_SECS",
                DEFAULT_JWT_MAX_TTL_SECS,
                60,
                366 * 86_400,
            )?,
            jwt_issuer: var("SECKILL_JWT_ISSUER"),
            jwt_audience: var("SECKILL_JWT_AUDIENCE"),
            admin_jwt_secret: secret(&var, "SECKILL_ADMIN_JWT_SECRET")?,
            admission_secret: secret(&var, "SECKILL_ADMISSION_SECRET")?,
            jwks: var("SECKILL_JWKS"),
            beacon_url: var("SECKILL_BEACON_URL"),
            time_zone,
            payment_window: Duration::from_secs(num(&var, "SECKILL_PAYMENT_WINDOW_SECS", 900, 1, 30 * 86_400)?),
            rate_limit_per_user: num(&var, "SECKILL_RATE_LIMIT_PER_USER", 5, 0, 1_000_000)? as u32,
            rate_limit_pay_cancel_per_user: num(&var, "SECKILL_RATE_LIMIT_PAY_CANCEL_PER_USER", 5, 0, 1_000_000)?
                as u32,
            rate_limit_per_ip: num(&var, "SECKILL_RATE_LIMIT_PER_IP", 2000, 0, 10_000_000)? as u32,
            trusted_proxies: proxies(var("SECKILL_TRUSTED_PROXIES").as_deref())?,
            max_in_flight: num(&var, "SECKILL_MAX_IN_FLIGHT", 4096, 0, 10_000_000)? as usize,
            migrate_on_start: flag(&var, "SECKILL_MIGRATE_ON_START", true)?,
            db_max_connections: num(&var, "SECKILL_DB_MAX_CONNECTIONS", 16, 1, 1000)? as u32,
            body_limit: num(&var, "SECKILL_BODY_LIMIT_BYTES", 64 * 1024, 256, 16 << 20)? as usize,
            dependency_timeout: millis(&var, "SECKILL_DEPENDENCY_TIMEOUT_MS", 2000, 10, 600_000)?,
            relay_batch: num(&var, "SECKILL_RELAY_BATCH", 5000, 1, 10_000)? as usize,
            relay_linger: millis(&var, "SECKILL_RELAY_LINGER_MS", 100, 0, 1000)?,
            relay_claim_idle: millis(&var, "SECKILL_RELAY_CLAIM_IDLE_MS", 10_000, 100, 86_400_000)?,
            worker_prefetch: num(&var, "SECKILL_WORKER_PREFETCH", 64, 1, 10_000)? as u16,
            worker_batch: num(&var, "SECKILL_WORKER_BATCH", 10_000, 1, 100_000)? as usize,
            delivery_limit: num(&var, "SECKILL_DELIVERY_LIMIT", 5, 1, 1000)? as u32,
            id_block: num(&var, "SECKILL_ID_BLOCK", 10_000, 1, 1_000_000)? as u32,
            outbox_format: outbox_format(&var)?,
            worker_hold_limit: millis(&var, "SECKILL_WORKER_HOLD_MS", 3000, 100, 600_000)?,
            lock_lease: millis(&var, "SECKILL_LOCK_LEASE_MS", 30_000, 300, 3_600_000)?,
            user_lock_wait: millis(&var, "SECKILL_USER_LOCK_WAIT_MS", 2000, 0, 60_000)?,
            audit_interval: millis(&var, "SECKILL_AUDIT_INTERVAL_MS", 5000, 10, 3_600_000)?,
            shard_recovery_interval: optional_millis(&var, "SECKILL_SHARD_RECOVERY_MS", 1000, 0, 3_600_000)?,
            max_clock_skew: optional_millis(&var, "SECKILL_MAX_CLOCK_SKEW_MS", 2000, 0, 3_600_000)?,
            missing_voucher_ttl: millis(&var, "SECKILL_MISSING_VOUCHER_TTL_MS", 1000, 0, 3_600_000)?,
            metrics_render_every: millis(&var, "SECKILL_METRICS_RENDER_MS", 1000, 0, 60_000)?,
            http_workers: num(&var, "SECKILL_HTTP_WORKERS", 0, 0, 1024)? as usize,
            runtime_threads: num(&var, "SECKILL_RUNTIME_THREADS", 0, 0, 1024)? as usize,
        };
        check_jwks(&s)?;
        Ok(s)
    }
}

/// `SECKILL_JWT_SECRET`, and whether it is the development secret (unset, or set
/// to it by hand).
fn jwt_secret(var: &impl Fn(&str) -> Option<String>) -> Result<(Secret, bool)> {
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
fn time_zone(var: &impl Fn(&str) -> Option<String>) -> Result<Tz> {
    let tz_name = var("SECKILL_TIME_ZONE").unwrap_or_else(|| "Asia/Shanghai".into());
    let time_zone: Tz = tz_name
        .parse()
        .map_err(|_| anyhow::anyhow!("SECKILL_TIME_ZONE: unknown IANA zone {tz_name:?}"))?;
    Ok(time_zone)
}

/// `SECKILL_DATABASE_STANDBY_URLS` as given, each listed URL checked to be a
/// Postgres URL.
fn standby_urls(var: &impl Fn(&str) -> Option<String>) -> Result<String> {
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
fn check_jwks(s: &Settings) -> Result<()> {
    if let Some(url) = s.jwks.as_deref().and_then(|j| j.strip_prefix("http://")) {
        let host = url.split(['/', '?']).next().unwrap_or_default();
        let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
        if !["127.0.0.1", "localhost", "[::1]"].contains(&host) {
            bail!(
                "SECKILL_JWKS: an identity provider's keys over plain http:// could be replaced on the way; \
                 use https:// (http:// is taken on a loopback address only)"
            );
        }
    }
    if s.jwks.is_some() && (s.jwt_issuer.is_none() || s.jwt_audience.is_none()) {
        bail!(
            "SECKILL_JWKS needs SECKILL_JWT_ISSUER and SECKILL_JWT_AUDIENCE: an identity provider's \
             tokens are taken only for this service's issuer and audience"
        );
    }
    Ok(())
}

/// A secret of its own for one purpose (`key`), as long as HS256's key must be.
fn secret(var: &impl Fn(&str) -> Option<String>, key: &str) -> Result<Option<Secret>> {
    match var(key) {
        Some(s) if s.len() < MIN_JWT_SECRET_BYTES => bail!(
            "{key} must be at least {MIN_JWT_SECRET_BYTES} bytes, got {} (e.g. openssl rand -hex 32)",
            s.len()
        ),
        s => Ok(s.map(Secret::new)),
    }
}

/// `SECKILL_TRUSTED_PROXIES`: addresses (a host network) and networks, comma-separated.
fn proxies(raw: Option<&str>) -> Result<Vec<ipnet::IpNet>> {
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

fn num(var: &impl Fn(&str) -> Option<String>, key: &str, default: u64, min: u64, max: u64) -> Result<u64> {
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
fn millis(var: &impl Fn(&str) -> Option<String>, key: &str, default: u64, min: u64, max: u64) -> Result<Duration> {
    Ok(Duration::from_millis(num(var, key, default, min, max)?))
}

/// A duration in milliseconds that 0 turns off (`None`), read as [`num`] reads it.
fn optional_millis(
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
fn outbox_format(var: &impl Fn(&str) -> Option<String>) -> Result<u32> {
    Ok(num(
        var,
        "SECKILL_OUTBOX_FORMAT",
        super::NEWEST_OUTBOX_FORMAT as u64,
        1,
        super::NEWEST_OUTBOX_FORMAT as u64,
    )? as u32)
}

fn flag(var: &impl Fn(&str) -> Option<String>, key: &str, default: bool) -> Result<bool> {
    match var(key).map(|v| v.trim().to_ascii_lowercase()) {
        None => Ok(default),
        Some(v) if ["1", "true", "yes", "on"].contains(&v.as_str()) => Ok(true),
        Some(v) if ["0", "false", "no", "off"].contains(&v.as_str()) => Ok(false),
        Some(v) => bail!("{key} must be true or false, got {v:?}"),
    }
}

/// Namespaces prefix Redis keys and AMQP names: keep them to a safe alphabet.
fn validate_namespace(ns: &str) -> Result<()> {
    let ok = !ns.is_empty() && ns.len() <= 64 && ns.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !ok {
        bail!("SECKILL_NAMESPACE must be 1-64 characters of [A-Za-z0-9_-], got {ns:?}");
    }
    Ok(())
}

/// Checks an `AMQP_URL`: one or more AMQP URLs, comma-separated. The error
/// names the position of a bad one, never its text (it holds a password).
fn check_amqp_urls(list: &str) -> Result<()> {
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
