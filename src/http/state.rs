//! What a request handler reads: the process's connections and the services
//! built on them, as one [`AppState`] the application builds (`crate::app`) and
//! hands to every handler.
use crate::broker::Broker;
use crate::clock::Clock;
use crate::config::Settings;
use crate::keys::Keys;
use crate::order::id_worker::IdWorker;
use crate::redis_conn::Redis;
use crate::sequence::Sequences;
use crate::voucher::cache::VoucherCache;
use sqlx::PgPool;
use std::sync::Arc;

/// Everything a request handler needs.
pub struct AppState {
    pub settings: Settings,
    /// For request handlers.
    pub pg: PgPool,
    /// For background tasks (worker, cache, id blocks): its connections live on the
    /// main runtime, not on an HTTP worker's, so they outlive the HTTP server during
    /// shutdown.
    pub background_pg: PgPool,
    pub redis: Redis,
    pub keys: Keys,
    pub cache: Arc<VoucherCache>,
    pub ids: Arc<IdWorker>,
    pub clock: Clock,
    pub broker: Arc<Broker>,
    pub sequences: Sequences,
    /// Names this process in Redis consumer groups and logs.
    pub instance: String,
    pub rate_limits: Arc<super::rate_limits::RateLimits>,
    /// Fair admission: admission tokens, queue tickets, proofs of work, frontiers.
    pub admit: Arc<crate::admit::Admission>,
    pub locks: Arc<crate::lock::LockService>,
    pub lifecycle: crate::order::lifecycle::Lifecycle,
    pub user_serializer: crate::lock::user::UserSerializer,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Redis losing state or going back in time: the sales this process has
    /// closed, its floors, the repairs ([`crate::recovery`]).
    pub recovery: Arc<crate::recovery::Recovery>,
    /// The order path: cache, id worker, Redis, clocks.
    pub orders: crate::order::place::OrderPlacer,
    /// The sales area: vouchers, stock, top-ups, pauses, books.
    pub sales: crate::voucher::sales::Sales,
    /// The idempotency keys' answers.
    pub answers: super::idempotency::Answers,
    /// Where orders are read from.
    pub lookup: crate::order::status::Lookup,
    /// Whether this process's clock is close enough to Postgres's to sell.
    pub clock_skew: Arc<crate::clock_skew::ClockSkew>,
    /// The last dependency checks, served by `GET /health/ready`.
    pub readiness: super::report::Readiness,
    /// The keys tokens are verified with (and an identity provider's, refreshed by
    /// a background task).
    pub jwt: Arc<super::auth::JwtKeys>,
    /// Each flash sale's units on sale as `GET /api/v1/vouchers/{id}` shows them:
    /// read from Redis at most every [`crate::voucher::stock::PUBLIC_REFRESH`] per
    /// instance, however many browse.
    pub public_stock: crate::admit::frontier::PerSale<Option<i64>>,
}
