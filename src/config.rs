//! Typed settings, read once at start-up from the environment and validated.
//!
//! The names of CONTRACT.md are fixed; the rest (`SECKILL_*`) tune the pipeline and
//! default to values that suit the local services. Secrets are never printed: the
//! `Debug` of [`Secret`] hides its value.
use anyhow::{bail, Context, Result};
use chrono_tz::Tz;
use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

/// The development JWT secret used when `SECKILL_JWT_SECRET` is not set.
pub const DEV_JWT_SECRET: &str = "seckill-development-secret-do-not-use-in-production";

/// The shortest `SECKILL_JWT_SECRET` accepted.
pub const MIN_JWT_SECRET_BYTES: usize = 32;

/// A string that must not reach a log line.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// `SECKILL_JWT_MAX_TTL_SECS`'s default: a day.
pub const DEFAULT_JWT_MAX_TTL_SECS: u64 = 86_400;

/// Everything the process needs to know, validated.
#[derive(Clone, Debug)]
pub struct Settings {
    pub http_addr: String,
    pub database_url: Secret,
    pub redis_url: Secret,
    /// `REDIS_URL` lists the seed nodes of a Redis Cluster (`SECKILL_REDIS_CLUSTER`).
    pub redis_cluster: bool,
    /// Replicas that must hold an order's reservation before it is acknowledged
    /// (`SECKILL_REDIS_WAIT_REPLICAS`, Redis `WAIT`); 0: the master's word suffices.
    pub redis_wait_replicas: u32,
    /// How long an order waits for those replicas (`SECKILL_REDIS_WAIT_TIMEOUT_MS`).
    pub redis_wait_timeout: Duration,
    pub amqp_url: Secret,
    pub namespace: String,
    pub jwt_secret: Secret,
    /// True when no secret was configured and the development one is in use
    /// (allowed on a loopback address only, see [`Settings::check_bind`]).
    pub jwt_secret_is_dev: bool,
    /// Longest token lifetime accepted (`SECKILL_JWT_MAX_TTL_SECS`, default a day).
    pub jwt_max_ttl_secs: u64,
    /// Required `iss` of tokens (`SECKILL_JWT_ISSUER`), when set.
    pub jwt_issuer: Option<String>,
    /// Required `aud` of tokens (`SECKILL_JWT_AUDIENCE`), when set.
    pub jwt_audience: Option<String>,
    pub time_zone: Tz,
    pub payment_window: Duration,
    pub rate_limit_per_user: u32,
    /// Pay and cancel requests per second per shopper, together
    /// (`SECKILL_RATE_LIMIT_PAY_CANCEL_PER_USER`; 0: none). Each waits for the
    /// shopper's lock, so this bounds the waiters one shopper can pile up.
    pub rate_limit_pay_cancel_per_user: u32,
    pub rate_limit_per_ip: u32,
    pub max_in_flight: usize,
    /// `SECKILL_MIGRATE_ON_START` (default true): `all` and `serve` apply migrations.
    pub migrate_on_start: bool,
    pub db_max_connections: u32,
    /// Largest accepted request body in bytes.
    pub body_limit: usize,
    /// Deadline of every single Redis, Postgres or RabbitMQ call.
    pub dependency_timeout: Duration,
    /// Outbox entries a relay reads (and publishes as one message) at most.
    pub relay_batch: usize,
    /// How long the relay lets orders gather after a round that found less than a
    /// full batch (`SECKILL_RELAY_LINGER_MS`, default 50; 0: none).
    pub relay_linger: Duration,
    /// How long an outbox entry may stay unacknowledged before another relay claims it.
    pub relay_claim_idle: Duration,
    /// Messages the worker may hold unacknowledged (RabbitMQ prefetch).
    pub worker_prefetch: u16,
    /// Orders the worker writes in one transaction at most.
    pub worker_batch: usize,
    /// Deliveries of one message before RabbitMQ dead-letters it.
    pub delivery_limit: u32,
    /// Order ids the ID worker takes from Redis in one call.
    pub id_block: u32,
    /// How long a worker holds a batch it cannot persist before handing it back.
    pub worker_hold_limit: Duration,
    /// Lease of watchdog-kept locks (renewed every third of it).
    pub lock_lease: Duration,
    /// How long a shopper's request waits for their previous one before 409.
    pub user_lock_wait: Duration,
    /// How often the running sales' books are audited (`seckill_sales_unbalanced`).
    pub audit_interval: Duration,
    /// How often every API instance completes the moves between a sharded sale's
    /// shards that a process left in transit (`SECKILL_SHARD_RECOVERY_MS`, default
    /// 1 s; 0: never, for tests that need a move to stay in transit).
    pub shard_recovery_interval: Option<Duration>,
    /// How far this process's clock may be from Postgres's before orders get 503
    /// (`SECKILL_MAX_CLOCK_SKEW_MS`, default 2 s; 0: not checked).
    pub max_clock_skew: Option<Duration>,
    /// How long an id that has no voucher is remembered as such, so that asking
    /// again does not reach Postgres (`SECKILL_MISSING_VOUCHER_TTL_MS`, default 1 s;
    /// 0: not remembered). A voucher created meanwhile shows at once anyway.
    pub missing_voucher_ttl: Duration,
    /// HTTP worker threads (`SECKILL_HTTP_WORKERS`; 0, the default: one per core).
    pub http_workers: usize,
    /// Threads of the runtime that runs the relay, the worker and the other
    /// background tasks (`SECKILL_RUNTIME_THREADS`; 0, the default: one per core).
    pub runtime_threads: usize,
}

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
        let (jwt_secret, jwt_secret_is_dev) = match var("SECKILL_JWT_SECRET") {
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
        };
        let namespace = var("SECKILL_NAMESPACE").unwrap_or_else(|| "seckill".into());
        validate_namespace(&namespace)?;
        let tz_name = var("SECKILL_TIME_ZONE").unwrap_or_else(|| "Asia/Shanghai".into());
        let time_zone: Tz = tz_name
            .parse()
            .map_err(|_| anyhow::anyhow!("SECKILL_TIME_ZONE: unknown IANA zone {tz_name:?}"))?;
        let s = Settings {
            http_addr: var("SECKILL_HTTP_ADDR").unwrap_or_else(|| "127.0.0.1:8080".into()),
            database_url: Secret::new(
                var("DATABASE_URL").unwrap_or_else(|| "postgres://root@127.0.0.1:5432/seckill".into()),
            ),
            redis_url: Secret::new(var("REDIS_URL").unwrap_or_else(|| "redis://127.0.0.1:6379".into())),
            redis_cluster: flag(&var, "SECKILL_REDIS_CLUSTER", false)?,
            redis_wait_replicas: num(&var, "SECKILL_REDIS_WAIT_REPLICAS", 0, 0, 16)? as u32,
            redis_wait_timeout: Duration::from_millis(num(&var, "SECKILL_REDIS_WAIT_TIMEOUT_MS", 200, 1, 60_000)?),
            amqp_url: Secret::new(var("AMQP_URL").unwrap_or_else(|| "amqp://guest:guest@127.0.0.1:5672/%2f".into())),
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
            time_zone,
            payment_window: Duration::from_secs(num(&var, "SECKILL_PAYMENT_WINDOW_SECS", 900, 1, 30 * 86_400)?),
            rate_limit_per_user: num(&var, "SECKILL_RATE_LIMIT_PER_USER", 5, 0, 1_000_000)? as u32,
            rate_limit_pay_cancel_per_user: num(&var, "SECKILL_RATE_LIMIT_PAY_CANCEL_PER_USER", 5, 0, 1_000_000)?
                as u32,
            rate_limit_per_ip: num(&var, "SECKILL_RATE_LIMIT_PER_IP", 2000, 0, 10_000_000)? as u32,
            max_in_flight: num(&var, "SECKILL_MAX_IN_FLIGHT", 4096, 0, 10_000_000)? as usize,
            migrate_on_start: flag(&var, "SECKILL_MIGRATE_ON_START", true)?,
            db_max_connections: num(&var, "SECKILL_DB_MAX_CONNECTIONS", 16, 1, 1000)? as u32,
            body_limit: num(&var, "SECKILL_BODY_LIMIT_BYTES", 64 * 1024, 256, 16 << 20)? as usize,
            dependency_timeout: Duration::from_millis(num(&var, "SECKILL_DEPENDENCY_TIMEOUT_MS", 2000, 10, 600_000)?),
            relay_batch: num(&var, "SECKILL_RELAY_BATCH", 1000, 1, 10_000)? as usize,
            relay_linger: Duration::from_millis(num(&var, "SECKILL_RELAY_LINGER_MS", 50, 0, 1000)?),
            relay_claim_idle: Duration::from_millis(num(&var, "SECKILL_RELAY_CLAIM_IDLE_MS", 10_000, 100, 86_400_000)?),
            worker_prefetch: num(&var, "SECKILL_WORKER_PREFETCH", 32, 1, 10_000)? as u16,
            worker_batch: num(&var, "SECKILL_WORKER_BATCH", 5000, 1, 100_000)? as usize,
            delivery_limit: num(&var, "SECKILL_DELIVERY_LIMIT", 5, 1, 1000)? as u32,
            id_block: num(&var, "SECKILL_ID_BLOCK", 1000, 1, 1_000_000)? as u32,
            worker_hold_limit: Duration::from_millis(num(&var, "SECKILL_WORKER_HOLD_MS", 3000, 100, 600_000)?),
            lock_lease: Duration::from_millis(num(&var, "SECKILL_LOCK_LEASE_MS", 30_000, 300, 3_600_000)?),
            user_lock_wait: Duration::from_millis(num(&var, "SECKILL_USER_LOCK_WAIT_MS", 2000, 0, 60_000)?),
            audit_interval: Duration::from_millis(num(&var, "SECKILL_AUDIT_INTERVAL_MS", 5000, 10, 3_600_000)?),
            shard_recovery_interval: match num(&var, "SECKILL_SHARD_RECOVERY_MS", 1000, 0, 3_600_000)? {
                0 => None,
                ms => Some(Duration::from_millis(ms)),
            },
            max_clock_skew: match num(&var, "SECKILL_MAX_CLOCK_SKEW_MS", 2000, 0, 3_600_000)? {
                0 => None,
                ms => Some(Duration::from_millis(ms)),
            },
            missing_voucher_ttl: Duration::from_millis(num(
                &var,
                "SECKILL_MISSING_VOUCHER_TTL_MS",
                1000,
                0,
                3_600_000,
            )?),
            http_workers: num(&var, "SECKILL_HTTP_WORKERS", 0, 0, 1024)? as usize,
            runtime_threads: num(&var, "SECKILL_RUNTIME_THREADS", 0, 0, 1024)? as usize,
        };
        Ok(s)
    }
}

impl Settings {
    /// Refuses to serve HTTP with the development secret (published in the
    /// repository: anyone could mint admin tokens) on anything but a loopback
    /// address, whether the variable is unset or set to that secret. A name that
    /// cannot be resolved now is refused too (it could resolve to a public address
    /// by the time the server binds).
    pub fn check_bind(&self) -> Result<()> {
        use std::net::ToSocketAddrs;
        if !self.jwt_secret_is_dev {
            return Ok(());
        }
        let addrs: Vec<_> = self.http_addr.to_socket_addrs().map(|a| a.collect()).with_context(|| {
            format!(
                "SECKILL_JWT_SECRET is the development secret and SECKILL_HTTP_ADDR ({}) does not resolve: \
                     set SECKILL_JWT_SECRET to {MIN_JWT_SECRET_BYTES}+ random bytes (e.g. openssl rand -hex 32)",
                self.http_addr
            )
        })?;
        if addrs.iter().any(|a: &std::net::SocketAddr| !a.ip().is_loopback()) {
            bail!(
                "SECKILL_JWT_SECRET is not set (or is the development secret) and SECKILL_HTTP_ADDR ({}) is not a loopback address: \
                 the development secret is public, anyone could mint admin tokens; \
                 set SECKILL_JWT_SECRET to {MIN_JWT_SECRET_BYTES}+ random bytes (e.g. openssl rand -hex 32)",
                self.http_addr
            );
        }
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
