//! Each group of [`Settings`] read from the variables: [`super::read`] holds the
//! readers of one variable (defaults, bounds, an error that names it).
use super::read::{
    check_amqp_urls, flag, jwt_secret, millis, num, optional_millis, outbox_format, proxies, secret, standby_urls,
    time_zone, validate_namespace,
};
use super::secret::Secret;
use super::settings::{Auth, Guards, Http, Pipeline, SaleRules, Services, DEFAULT_JWT_MAX_TTL_SECS};
use anyhow::Result;
use std::time::Duration;

impl Services {
    /// `DATABASE_URL`, `REDIS_URL`, `AMQP_URL` and how they are used.
    pub(super) fn read(var: &impl Fn(&str) -> Option<String>) -> Result<Self> {
        let namespace = var("SECKILL_NAMESPACE").unwrap_or_else(|| "seckill".into());
        validate_namespace(&namespace)?;
        let standbys = standby_urls(var)?;
        let amqp_url = var("AMQP_URL").unwrap_or_else(|| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
        check_amqp_urls(&amqp_url)?;
        Ok(Self {
            database_url: Secret::new(
                var("DATABASE_URL").unwrap_or_else(|| "postgres://root@127.0.0.1:5432/seckill".into()),
            ),
            database_standby_urls: Secret::new(standbys),
            redis_url: Secret::new(var("REDIS_URL").unwrap_or_else(|| "redis://127.0.0.1:6379".into())),
            redis_cluster: flag(var, "SECKILL_REDIS_CLUSTER", false)?,
            amqp_url: Secret::new(amqp_url),
            namespace,
            migrate_on_start: flag(var, "SECKILL_MIGRATE_ON_START", true)?,
            db_max_connections: num(var, "SECKILL_DB_MAX_CONNECTIONS", 16, 1, 1000)? as u32,
            dependency_timeout: millis(var, "SECKILL_DEPENDENCY_TIMEOUT_MS", 2000, 10, 600_000)?,
        })
    }
}

impl Http {
    /// The HTTP edge's variables.
    pub(super) fn read(var: &impl Fn(&str) -> Option<String>) -> Result<Self> {
        Ok(Self {
            http_addr: var("SECKILL_HTTP_ADDR").unwrap_or_else(|| "127.0.0.1:8080".into()),
            rate_limit_per_user: num(var, "SECKILL_RATE_LIMIT_PER_USER", 5, 0, 1_000_000)? as u32,
            rate_limit_pay_cancel_per_user: num(var, "SECKILL_RATE_LIMIT_PAY_CANCEL_PER_USER", 5, 0, 1_000_000)? as u32,
            rate_limit_per_ip: num(var, "SECKILL_RATE_LIMIT_PER_IP", 2000, 0, 10_000_000)? as u32,
            trusted_proxies: proxies(var("SECKILL_TRUSTED_PROXIES").as_deref())?,
            max_in_flight: num(var, "SECKILL_MAX_IN_FLIGHT", 4096, 0, 10_000_000)? as usize,
            max_held_waits: num(var, "SECKILL_MAX_HELD_WAITS", 10_000, 0, 1_000_000)? as usize,
            max_wait_secs: num(var, "SECKILL_MAX_WAIT_SECS", 30, 1, 30)? as u32,
            body_limit: num(var, "SECKILL_BODY_LIMIT_BYTES", 64 * 1024, 256, 16 << 20)? as usize,
            metrics_render_every: millis(var, "SECKILL_METRICS_RENDER_MS", 1000, 0, 60_000)?,
            http_workers: num(var, "SECKILL_HTTP_WORKERS", 0, 0, 1024)? as usize,
        })
    }
}

impl Auth {
    /// The token keys and policy (`SECKILL_JWT_*`, `SECKILL_ADMIN_JWT_SECRET`, `SECKILL_ADMISSION_SECRET`, `SECKILL_JWKS`).
    pub(super) fn read(var: &impl Fn(&str) -> Option<String>) -> Result<Self> {
        let (jwt_secret, jwt_secret_is_dev) = jwt_secret(var)?;
        Ok(Self {
            jwt_secret,
            jwt_secret_is_dev,
            jwt_max_ttl_secs: num(
                var,
                "SECKILL_JWT_MAX_TTL_SECS",
                DEFAULT_JWT_MAX_TTL_SECS,
                60,
                366 * 86_400,
            )?,
            jwt_issuer: var("SECKILL_JWT_ISSUER"),
            jwt_audience: var("SECKILL_JWT_AUDIENCE"),
            admin_jwt_secret: secret(var, "SECKILL_ADMIN_JWT_SECRET")?,
            admission_secret: secret(var, "SECKILL_ADMISSION_SECRET")?,
            jwks: var("SECKILL_JWKS"),
        })
    }
}

impl Pipeline {
    /// The order pipeline's variables (replication, relay, worker, ids).
    pub(super) fn read(var: &impl Fn(&str) -> Option<String>) -> Result<Self> {
        Ok(Self {
            redis_wait_replicas: num(var, "SECKILL_REDIS_WAIT_REPLICAS", 0, 0, 16)? as u32,
            redis_wait_timeout: millis(var, "SECKILL_REDIS_WAIT_TIMEOUT_MS", 200, 1, 60_000)?,
            relay_batch: num(var, "SECKILL_RELAY_BATCH", 5000, 1, 10_000)? as usize,
            relay_linger: millis(var, "SECKILL_RELAY_LINGER_MS", 100, 0, 1000)?,
            relay_claim_idle: millis(var, "SECKILL_RELAY_CLAIM_IDLE_MS", 10_000, 100, 86_400_000)?,
            worker_prefetch: num(var, "SECKILL_WORKER_PREFETCH", 64, 1, 10_000)? as u16,
            worker_batch: num(var, "SECKILL_WORKER_BATCH", 10_000, 1, 100_000)? as usize,
            delivery_limit: num(var, "SECKILL_DELIVERY_LIMIT", 5, 1, 1000)? as u32,
            id_block: num(var, "SECKILL_ID_BLOCK", 10_000, 1, 1_000_000)? as u32,
            outbox_format: outbox_format(var)?,
            worker_hold_limit: millis(var, "SECKILL_WORKER_HOLD_MS", 3000, 100, 600_000)?,
            runtime_threads: num(var, "SECKILL_RUNTIME_THREADS", 0, 0, 1024)? as usize,
        })
    }
}

impl Guards {
    /// The locks' and the self-checks' variables.
    pub(super) fn read(var: &impl Fn(&str) -> Option<String>) -> Result<Self> {
        Ok(Self {
            lock_lease: millis(var, "SECKILL_LOCK_LEASE_MS", 30_000, 300, 3_600_000)?,
            user_lock_wait: millis(var, "SECKILL_USER_LOCK_WAIT_MS", 2000, 0, 60_000)?,
            audit_interval: millis(var, "SECKILL_AUDIT_INTERVAL_MS", 5000, 10, 3_600_000)?,
            shard_recovery_interval: optional_millis(var, "SECKILL_SHARD_RECOVERY_MS", 1000, 0, 3_600_000)?,
            repair_lease: millis(var, "SECKILL_REPAIR_LEASE_MS", 5000, 100, 600_000)?,
            replica_check: millis(var, "SECKILL_REPLICA_CHECK_MS", 250, 10, 60_000)?,
            max_clock_skew: optional_millis(var, "SECKILL_MAX_CLOCK_SKEW_MS", 2000, 0, 3_600_000)?,
            missing_voucher_ttl: millis(var, "SECKILL_MISSING_VOUCHER_TTL_MS", 1000, 0, 3_600_000)?,
        })
    }
}

impl SaleRules {
    /// The shop's rules for every sale.
    pub(super) fn read(var: &impl Fn(&str) -> Option<String>) -> Result<Self> {
        let time_zone = time_zone(var)?;
        Ok(Self {
            beacon_url: var("SECKILL_BEACON_URL"),
            time_zone,
            payment_window: Duration::from_secs(num(var, "SECKILL_PAYMENT_WINDOW_SECS", 900, 1, 30 * 86_400)?),
        })
    }
}
