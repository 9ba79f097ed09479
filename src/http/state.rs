//! What a request handler reads: the areas' services, as one [`AppState`] the
//! application builds (`crate::app`) and hands to every handler. The connections
//! they are built on are in [`Handles`], for the background tasks.
use crate::broker::Broker;
use crate::clock::Clock;
use crate::config::Settings;
use crate::keys::Keys;
use crate::numbers::id_worker::IdWorker;
use crate::numbers::Sequences;
use crate::redis_conn::Redis;
use crate::sales::cache::VoucherCache;
use sqlx::PgPool;
use std::sync::Arc;

/// Everything a request handler needs: the areas' services, and the HTTP edge's
/// own parts.
pub struct AppState {
    pub settings: Settings,
    pub clock: Clock,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The sales area: vouchers, stock, top-ups, pauses.
    pub sales: crate::sales::service::Sales,
    /// Reports that read several areas: a sale's books.
    pub reports: crate::reports::Reports,
    /// The ordering area: placing, reading, paying and cancelling orders.
    pub ordering: Ordering,
    /// Fair admission: admission tokens, queue places, raffles, proofs of work,
    /// frontiers.
    pub admit: Arc<crate::admission::Admission>,
    /// Redis losing state or going back in time: the sales this process has
    /// closed, the points it saw, the repairs ([`crate::recovery`]).
    pub recovery: Arc<crate::recovery::Recovery>,
    /// Daily business numbers.
    pub sequences: Sequences,
    /// The HTTP edge's own: rate limits, idempotency answers, readiness, keys.
    pub http: Edge,
    /// The connections and process-wide parts the services are built on: for the
    /// background tasks, never for a handler.
    pub handles: Handles,
}

/// The ordering area's services.
pub struct Ordering {
    /// The order path: cache, id worker, Redis, clocks.
    pub placer: crate::ordering::place::OrderPlacer,
    /// Where orders are read from.
    pub lookup: crate::ordering::status::Lookup,
    /// Pay, cancel, payment timeouts.
    pub lifecycle: crate::ordering::lifecycle::Lifecycle,
    /// One pay or cancel of a shopper at a time, across instances.
    pub user_serializer: crate::locks::user::UserSerializer,
}

/// The HTTP edge's own parts.
pub struct Edge {
    pub rate_limits: Arc<super::rate_limits::RateLimits>,
    /// The idempotency keys' answers.
    pub answers: super::idempotency::Answers,
    /// The last dependency checks, served by `GET /health/ready`.
    pub readiness: super::report::Readiness,
    /// The keys tokens are verified with (and an identity provider's, refreshed by
    /// a background task).
    pub jwt: Arc<super::auth::JwtKeys>,
    /// Each flash sale's units on sale as `GET /api/v1/vouchers/{id}` shows them:
    /// read from Redis at most every [`crate::sales::stock::PUBLIC_REFRESH`] per
    /// instance, however many browse.
    pub public_stock: crate::admission::frontier::PerSale<Option<i64>>,
}

/// The connections and process-wide parts the services are built on.
pub struct Handles {
    /// The request handlers' pool (the services hold it).
    pub pg: PgPool,
    /// For background tasks (worker, cache, id blocks): its connections live on the
    /// main runtime, not on an HTTP worker's, so they outlive the HTTP server during
    /// shutdown.
    pub background_pg: PgPool,
    pub redis: Redis,
    pub keys: Keys,
    pub cache: Arc<VoucherCache>,
    pub ids: Arc<IdWorker>,
    pub broker: Arc<Broker>,
    /// Names this process in Redis consumer groups and logs.
    pub instance: String,
    pub locks: Arc<crate::locks::LockService>,
    /// Whether this process's clock is close enough to Postgres's to sell.
    pub clock_skew: Arc<crate::clock_skew::ClockSkew>,
}
