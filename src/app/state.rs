//! What the process holds: its connections ([`clients`]) and the services built on
//! them, each made (and where it can, warmed) once at start.
use super::mode::{Mode, Options};
use crate::config::Settings;
use crate::http::state::{AppState, Edge, Handles};
use crate::numbers::id_worker::IdWorker;
use crate::numbers::Sequences;
use crate::sales::cache::VoucherCache;
use anyhow::{Context, Result};
use clients::{clients, Clients};
use services::{ordering_of, reports_of, sales_of};
use sqlx::PgPool;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

mod clients;
mod services;
pub use clients::pg_pool;

/// Applies pending migrations and makes the default `order` sequence rule exist.
pub async fn migrate(pg: &PgPool, sequences: &Sequences, settings: &Settings) -> Result<()> {
    sqlx::migrate!("./migrations")
        .run(pg)
        .await
        .context("applying migrations")?;
    sequences.ensure_order_rule(settings.sales.time_zone).await
}

/// The state, and the sequences the background tasks use (on the background pool).
pub struct Connected {
    pub state: Arc<AppState>,
    pub background_sequences: Sequences,
}

/// Makes the pools and clients (lazily: the process starts while a dependency is
/// down), migrates if asked, loads the voucher cache, and builds the services every handler and task shares.
pub async fn connect(settings: Settings, mode: Mode, opts: &Options, stop: &CancellationToken) -> Result<Connected> {
    let c = clients(&settings, stop).await?;
    let background_sequences = Sequences::new(c.background_pg.clone(), opts.clock.clone()).witnessed(c.witness.clone());
    let sequences = Sequences::new(c.pg.clone(), opts.clock.clone()).witnessed(c.witness.clone());
    migrate_or_check(&settings, mode, &c.background_pg, &background_sequences).await?;
    let cache = loaded_cache(&settings, &c.background_pg).await;
    let rate_limits = Arc::new(crate::http::rate_limits::RateLimits::new(&settings.http));
    let admit = Arc::new(crate::admission::Admission::new(
        &crate::admission::signing::root_of(&settings.auth),
        c.pg.clone(),
        c.background_pg.clone(),
    ));
    let jwt = jwt_keys(&settings).await;
    let instance = uuid::Uuid::new_v4().simple().to_string();
    // Its release subscription is one of the owned background tasks.
    let locks = crate::locks::LockService::new(
        c.redis.clone(),
        c.keys.clone(),
        &instance,
        settings.guards.lock_lease,
        stop.clone(),
    );
    let user_serializer = crate::locks::user::UserSerializer::new(locks.clone(), settings.guards.user_lock_wait);
    let formats = announced_formats(&settings, mode, &c, &instance).await?;
    let recovery = refreshed_recovery(&c, &cache, formats, &settings).await;
    let clock_skew = measured_clock_skew(&settings, &c.background_pg, opts).await;
    let ids = order_ids(&settings, mode, &c, opts).await;
    let built = Built {
        cache: &cache,
        ids: &ids,
        recovery: &recovery,
        clock_skew: &clock_skew,
        admission: &admit,
    };
    let placer = order_placer(&settings, &c, built, opts);
    let board = Arc::new(crate::ordering::status::Board::new(settings.http.max_held_waits));
    let ordering = ordering_of(&c, &cache, &recovery, placer, user_serializer, board);
    let sales = sales_of(&c, &recovery, &cache);
    let reports = reports_of(&c);
    let state = Arc::new(AppState {
        sales,
        reports,
        ordering,
        admit,
        recovery,
        sequences,
        http: Edge {
            rate_limits,
            answers: crate::http::idempotency::Answers::new(c.pg.clone()),
            readiness: Default::default(),
            jwt,
            public_stock: Default::default(),
        },
        settings,
        clock: opts.clock.clone(),
        metrics: c.metrics.clone(),
        handles: Handles {
            pg: c.pg,
            background_pg: c.background_pg.clone(),
            redis: c.redis,
            keys: c.keys,
            cache,
            ids,
            broker: c.broker,
            instance,
            locks,
            clock_skew,
        },
    });
    Ok(Connected {
        state,
        background_sequences,
    })
}

/// Migrates if asked (an HTTP process with `migrate_on_start`); otherwise only
/// checks the default order rule, a failure logged.
async fn migrate_or_check(
    settings: &Settings,
    mode: Mode,
    background_pg: &PgPool,
    background_sequences: &Sequences,
) -> Result<()> {
    if settings.services.migrate_on_start && mode.serves_http() {
        migrate(background_pg, background_sequences, settings).await?;
    } else if let Err(e) = background_sequences.ensure_order_rule(settings.sales.time_zone).await {
        tracing::warn!(error = %format!("{e:#}"), "could not check the default order rule");
    }
    Ok(())
}

/// The voucher cache, loaded once now if Postgres answers.
async fn loaded_cache(settings: &Settings, background_pg: &PgPool) -> Arc<VoucherCache> {
    let cache = Arc::new(VoucherCache::new(settings.guards.missing_voucher_ttl));
    if let Err(e) = cache.reload(background_pg, true).await {
        tracing::warn!(error = %format!("{e:#}"), "voucher cache not loaded yet; retrying in the background");
    }
    cache
}

/// The keys tokens are checked with, an identity provider's fetched once now.
async fn jwt_keys(settings: &Settings) -> Arc<crate::http::auth::JwtKeys> {
    // Shopper tokens of an identity provider: its keys fetched before the first
    // request where they can be (a provider that does not answer yet is retried
    // in the background, and its tokens answered 503 meanwhile).
    let jwks = settings.auth.jwks.as_deref().map(|source| {
        Arc::new(crate::http::auth::jwks::Jwks::new(
            source,
            settings.services.dependency_timeout,
        ))
    });
    if let Some(jwks) = &jwks {
        if let Err(e) = jwks.fetch().await {
            tracing::warn!(error = %format!("{e:#}"), "SECKILL_JWKS not read yet; retrying in the background");
        }
    }
    Arc::new(crate::http::auth::JwtKeys::configured(&settings.auth, jwks))
}

/// The outbox formats of this process, announced now if Postgres answers in time;
/// an error if writers are already past what this process reads.
async fn announced_formats(
    settings: &Settings,
    mode: Mode,
    c: &Clients,
    instance: &str,
) -> Result<Arc<crate::ordering::outbox::format::Formats>> {
    let formats = Arc::new(crate::ordering::outbox::format::Formats::new(
        c.background_pg.clone(),
        instance.to_owned(),
        mode.name(),
        settings.pipeline.outbox_format,
        c.metrics.outbox_format_written.clone(),
    ));
    // Before its relay reads an entry: announce the formats this process reads
    // (refused, and the process stops, if writers are past them).
    match tokio::time::timeout(Duration::from_secs(10), formats.register()).await {
        Ok(Ok(())) => {}
        Ok(Err(refused @ crate::ordering::outbox::format::Refused::TooOld { .. })) => return Err(refused.into()),
        Ok(Err(e)) => {
            tracing::warn!(error = %format!("{e:#}"), "outbox formats not announced yet; relaying waits, retrying in the background")
        }
        Err(_) => tracing::warn!(
            "outbox formats not announced yet (Postgres slow); relaying waits, retrying in the background"
        ),
    }
    Ok(formats)
}

/// The recovery every writer respects, the points and closed sales Postgres holds, read once now
/// if Postgres answers in time.
async fn refreshed_recovery(
    c: &Clients,
    cache: &Arc<VoucherCache>,
    formats: Arc<crate::ordering::outbox::format::Formats>,
    settings: &Settings,
) -> Arc<crate::recovery::Recovery> {
    let (lease, pipeline) = (settings.guards.repair_lease, &settings.pipeline);
    let timeout = settings.services.dependency_timeout;
    let recovery = Arc::new(
        crate::recovery::Recovery::new(
            c.redis.clone(),
            c.background_pg.clone(),
            c.keys.clone(),
            cache.clone(),
            c.metrics.clone(),
            formats,
        )
        .with_lease(lease)
        .with_replicas(pipeline.redis_wait_replicas, pipeline.redis_wait_timeout, timeout),
    );
    // Before the first order: the points Postgres recorded (a process that starts
    // after Redis went back in time must know what the relays saw), and the sales
    // another process closed.
    match tokio::time::timeout(Duration::from_secs(10), recovery.refresh()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %format!("{e:#}"), "the shards' points not read yet; retrying in the background")
        }
        Err(_) => tracing::warn!("the shards' points not read yet (Postgres slow); retrying in the background"),
    }
    recovery
}

/// The clock-skew guard, its offset from Postgres measured once now if it answers.
async fn measured_clock_skew(
    settings: &Settings,
    background_pg: &PgPool,
    opts: &Options,
) -> Arc<crate::clock_skew::ClockSkew> {
    let clock_skew = Arc::new(crate::clock_skew::ClockSkew::new(settings.guards.max_clock_skew));
    if let Err(e) = clock_skew.check(background_pg, &opts.clock).await {
        tracing::warn!(error = %format!("{e:#}"), "clock offset not measured yet; selling until it is");
    }
    clock_skew
}

/// The order id source, with a first block reserved now in an HTTP process.
async fn order_ids(settings: &Settings, mode: Mode, c: &Clients, opts: &Options) -> Arc<IdWorker> {
    let ids = IdWorker::witnessed(
        c.background_pg.clone(),
        opts.clock.clone(),
        settings.pipeline.id_block,
        Some(c.witness.clone()),
    );
    if mode.serves_http() {
        if let Err(e) = ids.warm_up().await {
            tracing::warn!(error = %format!("{e:#}"), "no order id block yet; the first order fetches one");
        }
    }
    ids
}

/// The parts the order path shares with the rest of the process.
struct Built<'a> {
    cache: &'a Arc<VoucherCache>,
    ids: &'a Arc<IdWorker>,
    recovery: &'a Arc<crate::recovery::Recovery>,
    clock_skew: &'a Arc<crate::clock_skew::ClockSkew>,
    admission: &'a Arc<crate::admission::Admission>,
}

/// The order path's services: the order script's caller and what it reads.
fn order_placer(
    settings: &Settings,
    c: &Clients,
    built: Built<'_>,
    opts: &Options,
) -> crate::ordering::place::OrderPlacer {
    let Built {
        cache,
        ids,
        recovery,
        clock_skew,
        admission,
    } = built;
    let replication = crate::ordering::replication::Replication::new(
        &c.redis,
        settings.pipeline.redis_wait_replicas,
        settings.pipeline.redis_wait_timeout,
        settings.services.dependency_timeout,
    );
    crate::ordering::place::OrderPlacer {
        cache: cache.clone(),
        ids: ids.clone(),
        redis: c.redis.clone(),
        admission: admission.clone(),
        reserver: Arc::new(crate::ordering::gates::Reserver::new(
            c.keys.clone(),
            replication.clone(),
            c.metrics.clone(),
            recovery.clone(),
        )),
        replication,
        keys: c.keys.clone(),
        clock: opts.clock.clone(),
        clock_skew: clock_skew.clone(),
        metrics: c.metrics.clone(),
        refill_flights: Default::default(),
    }
}
