//! [`Settings`]: everything the process needs to know, as validated fields.
use super::secret::Secret;
use chrono_tz::Tz;
use std::time::Duration;

/// `SECKILL_JWT_MAX_TTL_SECS`'s default: a day.
pub const DEFAULT_JWT_MAX_TTL_SECS: u64 = 86_400;

/// The newest outbox entry format this binary reads and writes: the highest
/// `SECKILL_OUTBOX_FORMAT` accepts, and its default. What each format is, and how
/// writers agree on one, is `crate::ordering::outbox::format`'s.
pub const NEWEST_OUTBOX_FORMAT: u32 = 2;

/// Everything the process needs to know, validated, in groups by what it
/// concerns (each field's variable is named on it).
#[derive(Clone, Debug)]
pub struct Settings {
    pub services: Services,
    pub http: Http,
    pub auth: Auth,
    pub pipeline: Pipeline,
    pub guards: Guards,
    pub sales: SaleRules,
}

/// Where the dependencies are and how the process talks to them.
#[derive(Clone, Debug)]
pub struct Services {
    pub database_url: Secret,
    /// `SECKILL_DATABASE_STANDBY_URLS`: the standbys that may be promoted in the
    /// primary's place, comma-separated (empty: none; the pools stay on `database_url`).
    pub database_standby_urls: Secret,
    pub redis_url: Secret,
    /// `REDIS_URL` lists the seed nodes of a Redis Cluster (`SECKILL_REDIS_CLUSTER`).
    pub redis_cluster: bool,
    pub amqp_url: Secret,
    pub namespace: String,
    pub db_max_connections: u32,
    /// `SECKILL_MIGRATE_ON_START` (default true): `all` and `serve` apply migrations.
    pub migrate_on_start: bool,
    /// Deadline of every single Redis, Postgres or RabbitMQ call.
    pub dependency_timeout: Duration,
}

/// The HTTP edge: its address and threads, what a request may be, and who may send how many.
#[derive(Clone, Debug)]
pub struct Http {
    pub http_addr: String,
    /// HTTP worker threads (`SECKILL_HTTP_WORKERS`; 0, the default: one per core).
    pub http_workers: usize,
    /// Largest accepted request body in bytes.
    pub body_limit: usize,
    pub max_in_flight: usize,
    /// Long polls (`GET /api/v1/orders/{id}?wait=`) held at once per instance
    /// (`SECKILL_MAX_HELD_WAITS`); past it they answer 503. They are not counted in
    /// `max_in_flight`.
    pub max_held_waits: usize,
    /// The longest a long poll is held (`SECKILL_MAX_WAIT_SECS`, 1–30, default 30):
    /// a longer `wait` (up to the contract's 30) is held this long. For a proxy
    /// whose idle timeout is shorter.
    pub max_wait_secs: u32,
    /// Proxies whose `X-Forwarded-For` names the client (`SECKILL_TRUSTED_PROXIES`,
    /// addresses or networks, comma-separated; none by default: the TCP peer is
    /// the client). The per-address limit and a sale's per-address cap count the
    /// address so found.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    pub rate_limit_per_user: u32,
    /// Pay and cancel requests per second per shopper, together
    /// (`SECKILL_RATE_LIMIT_PAY_CANCEL_PER_USER`; 0: none). Each waits for the
    /// shopper's lock, so this bounds the waiters one shopper can pile up.
    pub rate_limit_pay_cancel_per_user: u32,
    pub rate_limit_per_ip: u32,
    /// How often `GET /metrics` renders its page at most (`SECKILL_METRICS_RENDER_MS`,
    /// default a second; 0: every request).
    pub metrics_render_every: Duration,
}

/// The keys tokens are signed and checked with, and what a token must say.
#[derive(Clone, Debug)]
pub struct Auth {
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
    /// The key of `admin` and `service` tokens (`SECKILL_ADMIN_JWT_SECRET`), when
    /// it is not `SECKILL_JWT_SECRET`.
    pub admin_jwt_secret: Option<Secret>,
    /// The key of admission tokens, proof-of-work challenges and raffle entry
    /// names (`SECKILL_ADMISSION_SECRET`); derived from `SECKILL_JWT_SECRET` when unset.
    pub admission_secret: Option<Secret>,
    /// An identity provider's JWKS, a URL or a file (`SECKILL_JWKS`): shopper tokens
    /// are signed by its keys.
    pub jwks: Option<String>,
}

/// An order's way from Redis to Postgres: replication, the relay, the broker, the worker, ids.
#[derive(Clone, Debug)]
pub struct Pipeline {
    /// Replicas that must hold an order's reservation before it is acknowledged
    /// (`SECKILL_REDIS_WAIT_REPLICAS`, Redis `WAIT`); 0: the master's word suffices.
    pub redis_wait_replicas: u32,
    /// How long an order waits for those replicas (`SECKILL_REDIS_WAIT_TIMEOUT_MS`).
    pub redis_wait_timeout: Duration,
    /// Orders a relay reads per outbox, about; a message carries `relay_batch` to
    /// `2 × relay_batch − 1` of them (one message if the round read fewer).
    pub relay_batch: usize,
    /// How long the relay lets orders gather after a round that found less than a
    /// full batch (`SECKILL_RELAY_LINGER_MS`, default 100; 0: none).
    pub relay_linger: Duration,
    /// How long an outbox entry may stay unacknowledged before another relay claims it.
    pub relay_claim_idle: Duration,
    /// Messages the worker may hold unacknowledged (RabbitMQ prefetch).
    pub worker_prefetch: u16,
    /// Orders the worker writes in one transaction at most.
    pub worker_batch: usize,
    /// Deliveries of one message before RabbitMQ dead-letters it.
    pub delivery_limit: u32,
    /// How long a worker holds a batch it cannot persist before handing it back.
    pub worker_hold_limit: Duration,
    /// The newest outbox format this process reads and writes (at most this
    /// binary's; lower only to act as an older version, see
    /// `crate::ordering::outbox::format`).
    pub outbox_format: u32,
    /// Order ids one reservation in Postgres takes (a process holds two blocks).
    pub id_block: u32,
    /// Threads of the runtime that runs the relay, the worker and the other
    /// background tasks (`SECKILL_RUNTIME_THREADS`; 0, the default: one per core).
    pub runtime_threads: usize,
}

/// How long locks are held and waited for, and how often the process checks itself: books, shards, clock, missing vouchers.
#[derive(Clone, Debug)]
pub struct Guards {
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
    /// How long a repair's lease on a sale lasts unless renewed
    /// (`SECKILL_REPAIR_LEASE_MS`, default 5 s): the repairer renews it every
    /// third of it while it works; a repairer frozen or cut off for longer loses
    /// the sale to another.
    pub repair_lease: Duration,
    /// How often the masters' in-sync replicas are read, off the order path
    /// (`SECKILL_REPLICA_CHECK_MS`, default 250 ms), when orders wait for replicas
    /// (`SECKILL_REDIS_WAIT_REPLICAS` above 0): a shard whose master has fewer is
    /// refused before it reserves.
    pub replica_check: Duration,
    /// How far this process's clock may be from Postgres's before orders get 503
    /// (`SECKILL_MAX_CLOCK_SKEW_MS`, default 2 s; 0: not checked).
    pub max_clock_skew: Option<Duration>,
    /// How long an id that has no voucher is remembered as such, so that asking
    /// again does not reach Postgres (`SECKILL_MISSING_VOUCHER_TTL_MS`, default 1 s;
    /// 0: not remembered). A voucher created meanwhile shows at once anyway.
    pub missing_voucher_ttl: Duration,
}

/// The shop's rules for every sale: its time zone, the payment window, the raffles' beacon.
#[derive(Clone, Debug)]
pub struct SaleRules {
    pub time_zone: Tz,
    pub payment_window: Duration,
    /// A drand HTTP relay of raffles' beacon chain (`SECKILL_BEACON_URL`, e.g.
    /// `https://api.drand.sh/<chain hash>`): rounds due are fetched from it. Unset:
    /// a raffle waits for anyone to submit its round.
    pub beacon_url: Option<String>,
}
