//! The pools and clients the process holds: its two Postgres pools (following a
//! promotion when standbys are listed), Redis, RabbitMQ, and the metrics and
//! witness every service built on them shares.
use crate::broker::Broker;
use crate::config::Settings;
use crate::keys::Keys;
use crate::redis_conn::Redis;
use anyhow::{Context, Result};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use std::str::FromStr;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A pool that connects lazily, so that the process starts while Postgres is down.
pub fn pg_pool(settings: &Settings) -> Result<PgPool> {
    let opts = pg_options(settings.services.database_url.expose(), settings)
        .context("DATABASE_URL is not a valid Postgres URL")?;
    Ok(PgPoolOptions::new()
        .max_connections(settings.services.db_max_connections)
        .acquire_timeout(settings.services.dependency_timeout)
        .connect_lazy_with(opts))
}

/// The connect options of one Postgres server, as every pool of the process uses them.
fn pg_options(url: &str, settings: &Settings) -> Result<PgConnectOptions> {
    let opts = PgConnectOptions::from_str(url)?;
    // No statement may outlive the dependency deadline by much: a query stuck on a
    // lock or a sick server fails instead of holding its connection forever.
    let deadline_ms = (settings.services.dependency_timeout.as_millis() * 5).max(5000);
    Ok(opts.options([("statement_timeout", deadline_ms.to_string())]))
}

/// With standbys listed (`SECKILL_DATABASE_STANDBY_URLS`), points `pools` at
/// the listed server that is the primary now, then starts the task that follows
/// it (see [`crate::app::pg_follow`]).
async fn follow_promotions(settings: &Settings, pools: Vec<PgPool>, stop: &CancellationToken) -> Result<()> {
    let standbys = crate::config::comma_list(settings.services.database_standby_urls.expose());
    if standbys.is_empty() {
        return Ok(());
    }
    let mut servers = vec![pg_options(settings.services.database_url.expose(), settings)?];
    for url in &standbys {
        // Checked when the settings were read.
        servers.push(pg_options(url, settings)?);
    }
    let at = crate::app::pg_follow::start(&servers, &pools, settings.services.dependency_timeout).await;
    tokio::spawn(crate::app::pg_follow::follow(
        servers,
        pools,
        settings.services.dependency_timeout,
        at,
        stop.clone(),
    ));
    Ok(())
}

/// The pools and clients every service is built on (none connected yet), and the
/// metrics and the counter witness they share.
pub(super) struct Clients {
    pub(super) keys: Keys,
    pub(super) pg: PgPool,
    pub(super) background_pg: PgPool,
    pub(super) redis: Redis,
    pub(super) broker: Arc<Broker>,
    pub(super) metrics: Arc<crate::metrics::Metrics>,
    pub(super) witness: Arc<crate::numbers::witness::Witness>,
}

/// Makes the two pools (following promotions if standbys are listed), the Redis and
/// RabbitMQ clients, the metrics and the witness.
pub(super) async fn clients(settings: &Settings, stop: &CancellationToken) -> Result<Clients> {
    let keys = Keys::new(&settings.services.namespace);
    let pg = pg_pool(settings)?;
    let background_pg = pg_pool(settings)?;
    follow_promotions(settings, vec![pg.clone(), background_pg.clone()], stop).await?;
    let redis = Redis::new(
        settings.services.redis_url.expose(),
        settings.services.redis_cluster,
        settings.services.dependency_timeout,
    )
    .context("REDIS_URL is not a valid Redis URL")?;
    let broker = Arc::new(Broker::new(
        settings.services.amqp_url.expose(),
        keys.clone(),
        settings.services.dependency_timeout,
        settings.pipeline.delivery_limit,
    ));
    let metrics = Arc::new(crate::metrics::Metrics::new());
    metrics.set_render_every(settings.http.metrics_render_every);
    // Every counter range checked against Postgres going back in time.
    let witness = Arc::new(crate::numbers::witness::Witness::new(
        redis.clone(),
        keys.clone(),
        Some(metrics.clone()),
    ));
    Ok(Clients {
        keys,
        pg,
        background_pg,
        redis,
        broker,
        metrics,
        witness,
    })
}
