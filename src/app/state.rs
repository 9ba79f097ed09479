//! What the process holds: its connections and the services built on them.
use super::mode::{Mode, Options};
use crate::broker::Broker;
use crate::config::Settings;
use crate::http::state::AppState;
use crate::keys::Keys;
use crate::order::id_worker::IdWorker;
use crate::redis_conn::Redis;
use crate::sequence::Sequences;
use crate::voucher::cache::VoucherCache;
use anyhow::{Context, Result};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A pool that connects lazily, so that the process starts while Postgres is down.
pub fn pg_pool(settings: &Settings) -> Result<PgPool> {
    let opts =
        pg_options(settings.database_url.expose(), settings).context("DATABASE_URL is not a valid Postgres URL")?;
    Ok(PgPoolOptions::new()
        .max_connections(settings.db_max_connections)
        .acquire_timeout(settings.dependency_timeout)
        .connect_lazy_with(opts))
}

/// The connect options of one Postgres server, as every pool of the process uses them.
fn pg_options(url: &str, settings: &Settings) -> Result<PgConnectOptions> {
    let opts = PgConnectOptions::from_str(url)?;
    // No statement may outlive the dependency deadline by much: a query stuck on a
    // lock or a sick server fails instead of holding its connection forever.
    let deadline_ms = (settings.dependency_timeout.as_millis() * 5).max(5000);
    Ok(opts.options([("statement_timeout", deadline_ms.to_string())]))
}

/// With standbys listed (`SECKILL_DATABASE_STANDBY_URLS`), points `pools` at
/// the listed server that is the primary now, then starts the task that follows
/// it (see [`super::pg_follow`]).
async fn follow_promotions(settings: &Settings, pools: Vec<PgPool>, stop: &CancellationToken) -> Result<()> {
    let standbys = crate::config::comma_list(settings.database_standby_urls.expose());
    if standbys.is_empty() {
        return Ok(());
    }
    let mut servers = vec![pg_options(settings.database_url.expose(), settings)?];
    for url in &standbys {
        // Checked when the settings were read.
        servers.push(pg_options(url, settings)?);
    }
    let at = super::pg_follow::start(&servers, &pools, settings.dependency_timeout).await;
    tokio::spawn(super::pg_follow::follow(
        servers,
        pools,
        settings.dependency_timeout,
        at,
        stop.clone(),
    ));
    Ok(())
}

/// Applies pending migrations and makes the default `order` sequence rule exist.
pub async fn migrate(pg: &PgPool, sequences: &Sequences, settings: &Settings) -> Result<()> {
    sqlx::migrate!("./migrations")
        .run(pg)
        .await
        .context("applying migrations")?;
    sequences.ensure_order_rule(settings.time_zone).await
}

/// The state, and the sequences the background tasks use (on the background pool).
pub struct Connected {
    pub state: Arc<AppState>,
    pub background_sequences: Sequences,
}

/// Makes the pools and clients (lazily: the process starts while a dependency is
/// down), migrates if asked, loads the voucher cache, checks the Redis server once,
/// and builds the services every handler and task shares.
pub async fn connect(settings: Settings, mode: Mode, opts: &Options, stop: &CancellationToken) -> Result<Connected> {
    let keys = Keys::new(&settings.namespace);
    let pg = pg_pool(&settings)?;
    let background_pg = pg_pool(&settings)?;
    follow_promotions(&settings, vec![pg.clone(), background_pg.clone()], stop).await?;
    let redis = Redis::new(
        settings.redis_url.expose(),
        settings.redis_cluster,
        settings.dependency_timeout,
    )
    .context("REDIS_URL is not a valid Redis URL")?;
    let broker = Arc::new(Broker::new(
        settings.amqp_url.expose(),
        keys.clone(),
        settings.dependency_timeout,
        settings.delivery_limit,
    ));
    let metrics = Arc::new(crate::metrics::Metrics::new());
    metrics.set_render_every(settings.metrics_render_every);
    // Every counter range checked against Postgres going back in time.
    let witness = Arc::new(crate::sequence::witness::Witness::new(
        redis.clone(),
        keys.clone(),
        Some(metrics.clone()),
    ));
    let background_sequences = Sequences::new(background_pg.clone(), opts.clock.clone()).witnessed(witness.clone());
    let sequences = Sequences::new(pg.clone(), opts.clock.clone()).witnessed(witness.clone());
    if settings.migrate_on_start && mode.serves_http() {
        migrate(&background_pg, &background_sequences, &settings).await?;
    } else if let Err(e) = background_sequences.ensure_order_rule(settings.time_zone).await {
        tracing::warn!(error = %format!("{e:#}"), "could not check the default order rule");
    }
    let cache = Arc::new(VoucherCache::new(settings.missing_voucher_ttl));
    if let Err(e) = cache.reload(&background_pg, true).await {
        tracing::warn!(error = %format!("{e:#}"), "voucher cache not loaded yet; retrying in the background");
    }
    let admission = Arc::new(crate::http::admission::Admission::new(&settings));
    let admit = Arc::new(crate::admit::Desk::new(&crate::admit::signing::root_of(&settings)));
    // Shopper tokens of an identity provider: its keys fetched before the first
    // request where they can be (a provider that does not answer yet is retried
    // in the background, and its tokens answered 503 meanwhile).
    let jwks = settings
        .jwks
        .as_deref()
        .map(|source| Arc::new(crate::http::auth::jwks::Jwks::new(source, settings.dependency_timeout)));
    if let Some(jwks) = &jwks {
        if let Err(e) = jwks.fetch().await {
            tracing::warn!(error = %format!("{e:#}"), "SECKILL_JWKS not read yet; retrying in the background");
        }
    }
    let jwt = Arc::new(crate::http::auth::JwtKeys::configured(&settings, jwks));
    let instance = uuid::Uuid::new_v4().simple().to_string();
    // Its release subscription is one of the owned background tasks.
    let locks = crate::lock::LockService::new(
        redis.clone(),
        keys.clone(),
        &instance,
        settings.lock_lease,
        stop.clone(),
    );
    let user_serializer = crate::lock::user::UserSerializer::new(locks.clone(), settings.user_lock_wait);
    let formats = Arc::new(crate::outbox::format::Formats::new(
        background_pg.clone(),
        instance.clone(),
        mode.name(),
        settings.outbox_format,
        metrics.outbox_format_written.clone(),
    ));
    // Before its relay reads an entry: announce the formats this process reads
    // (refused, and the process stops, if writers are past them).
    match tokio::time::timeout(Duration::from_secs(10), formats.register()).await {
        Ok(Ok(())) => {}
        Ok(Err(refused @ crate::outbox::format::Refused::TooOld { .. })) => return Err(refused.into()),
        Ok(Err(e)) => {
            tracing::warn!(error = %format!("{e:#}"), "outbox formats not announced yet; relaying waits, retrying in the background")
        }
        Err(_) => tracing::warn!(
            "outbox formats not announced yet (Postgres slow); relaying waits, retrying in the background"
        ),
    }
    let recovery = Arc::new(crate::recovery::Recovery::new(
        redis.clone(),
        background_pg.clone(),
        keys.clone(),
        cache.clone(),
        metrics.clone(),
        formats,
    ));
    // Before the first order: the floors Postgres recorded (a process that starts
    // after Redis went back in time must know what the relays saw), and the sales
    // another process closed.
    match tokio::time::timeout(Duration::from_secs(10), recovery.refresh()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %format!("{e:#}"), "the shards' floors not read yet; retrying in the background")
        }
        Err(_) => tracing::warn!("the shards' floors not read yet (Postgres slow); retrying in the background"),
    }
    let lifecycle = crate::order::lifecycle::Lifecycle {
        pg: pg.clone(),
        redis: redis.clone(),
        keys: keys.clone(),
        recovery: recovery.clone(),
    };
    let clock_skew = Arc::new(crate::clock_skew::ClockSkew::new(settings.max_clock_skew));
    if let Err(e) = clock_skew.check(&background_pg, &opts.clock).await {
        tracing::warn!(error = %format!("{e:#}"), "clock offset not measured yet; selling until it is");
    }
    let ids = IdWorker::witnessed(
        background_pg.clone(),
        opts.clock.clone(),
        settings.id_block,
        Some(witness.clone()),
    );
    if mode.serves_http() {
        if let Err(e) = ids.warm_up().await {
            tracing::warn!(error = %format!("{e:#}"), "no order id block yet; the first order fetches one");
        }
    }
    let replication = crate::order::replication::Replication::new(
        &redis,
        settings.redis_wait_replicas,
        settings.redis_wait_timeout,
        settings.dependency_timeout,
    );
    let orders = crate::order::place::OrderDesk {
        cache: cache.clone(),
        ids: ids.clone(),
        redis: redis.clone(),
        reserver: Arc::new(crate::order::reserve::Reserver::new(
            keys.clone(),
            replication.clone(),
            metrics.clone(),
            recovery.clone(),
        )),
        replication,
        keys: keys.clone(),
        clock: opts.clock.clone(),
        clock_skew: clock_skew.clone(),
        metrics: metrics.clone(),
        movers: Default::default(),
    };
    let lookup = crate::order::status::Lookup {
        pg: pg.clone(),
        redis: redis.clone(),
        keys: keys.clone(),
        cache: cache.clone(),
        recovery: recovery.clone(),
    };
    let state = Arc::new(AppState {
        orders,
        lookup,
        ids,
        settings,
        pg,
        background_pg: background_pg.clone(),
        redis,
        keys,
        cache,
        clock: opts.clock.clone(),
        broker,
        sequences,
        instance,
        admission,
        admit,
        locks,
        user_serializer,
        lifecycle,
        metrics: metrics.clone(),
        recovery,
        clock_skew,
        readiness: Default::default(),
        jwt,
        public_stock: Default::default(),
    });
    Ok(Connected {
        state,
        background_sequences,
    })
}
