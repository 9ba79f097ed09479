//! Builds the application: connections, routes, background tasks, shutdown.
//!
//! [`Application::build`] binds its own listener (port 0 picks a free one, see
//! [`Application::port`]), so tests start the real application in-process.
use crate::broker::Broker;
use crate::clock::Clock;
use crate::config::Settings;
use crate::http::auth::JwtKeys;
use crate::http::{health, ApiError};
use crate::keys::Keys;
use crate::order::id_worker::IdWorker;
use crate::outbox::Relay;
use crate::redis_conn::Redis;
use crate::sequence::counter::DurableCounter;
use crate::sequence::Sequences;
use crate::voucher::cache::{self, VoucherCache};
use crate::worker::Worker;
use actix_web::dev::ServerHandle;
use actix_web::error::{JsonPayloadError, PathError, QueryPayloadError};
use actix_web::http::StatusCode;
use actix_web::{web, App, HttpRequest, HttpServer};
use anyhow::{Context, Result};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use std::net::TcpListener;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing_actix_web::TracingLogger;

/// What one process runs (the subcommands of CONTRACT.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// API, outbox relay and order worker.
    All,
    /// API and outbox relay.
    Serve,
    /// Order worker only.
    Worker,
}

impl Mode {
    fn serves_http(self) -> bool {
        self != Mode::Worker
    }
    fn relays(self) -> bool {
        self != Mode::Worker
    }
    fn works(self) -> bool {
        self != Mode::Serve
    }
}

/// Knobs tests turn; production uses the defaults.
#[derive(Clone)]
pub struct Options {
    pub clock: Clock,
    /// Run the relay (tests turn it off to leave orders in the outbox).
    pub relay: bool,
    /// Run the worker where the mode has one.
    pub worker: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            clock: Clock::system(),
            relay: true,
            worker: true,
        }
    }
}

/// Everything a request handler needs.
pub struct AppState {
    pub settings: Settings,
    /// For request handlers.
    pub pg: PgPool,
    /// For background tasks (worker, cache, id blocks): its connections live on the
    /// main runtime, not on an HTTP worker's, so they outlive the HTTP server during
    /// shutdown.
    pub jobs_pg: PgPool,
    pub redis: Redis,
    pub keys: Keys,
    pub cache: Arc<VoucherCache>,
    pub ids: Arc<IdWorker>,
    pub clock: Clock,
    pub broker: Arc<Broker>,
    pub sequences: Sequences,
    /// Names this process in Redis consumer groups and logs.
    pub instance: String,
    pub admission: Arc<crate::http::admission::Admission>,
    pub locks: Arc<crate::lock::LockService>,
    pub lifecycle: crate::order::lifecycle::Lifecycle,
    pub user_serializer: crate::lock::user::UserSerializer,
    pub metrics: Arc<crate::metrics::Metrics>,
}

pub struct Application {
    port: Option<u16>,
    server: Option<(ServerHandle, JoinHandle<std::io::Result<()>>)>,
    tasks: Vec<JoinHandle<()>>,
    stop: CancellationToken,
    state: Arc<AppState>,
}

/// A pool that connects lazily, so that the process starts while Postgres is down.
pub fn pg_pool(settings: &Settings) -> Result<PgPool> {
    let opts = PgConnectOptions::from_str(settings.database_url.expose())
        .context("DATABASE_URL is not a valid Postgres URL")?;
    // No statement may outlive the dependency deadline by much: a query stuck on a
    // lock or a sick server fails instead of holding its connection forever.
    let deadline_ms = (settings.dependency_timeout.as_millis() * 5).max(5000);
    let opts = opts.options([("statement_timeout", deadline_ms.to_string())]);
    Ok(PgPoolOptions::new()
        .max_connections(settings.db_max_connections)
        .acquire_timeout(settings.dependency_timeout)
        .connect_lazy_with(opts))
}

/// Applies pending migrations and makes the default `order` sequence rule exist.
pub async fn migrate(pg: &PgPool, sequences: &Sequences, settings: &Settings) -> Result<()> {
    sqlx::migrate!("./migrations")
        .run(pg)
        .await
        .context("applying migrations")?;
    sequences.ensure_order_rule(settings.time_zone).await
}

impl Application {
    pub async fn build(settings: Settings, mode: Mode) -> Result<Self> {
        Self::build_with(settings, mode, Options::default()).await
    }

    pub async fn build_with(settings: Settings, mode: Mode, opts: Options) -> Result<Self> {
        if settings.jwt_secret_is_dev && mode.serves_http() {
            tracing::warn!("SECKILL_JWT_SECRET is not set: using the DEVELOPMENT secret; anyone can mint tokens. Never run this in production.");
        }
        let keys = Keys::new(&settings.namespace);
        let pg = pg_pool(&settings)?;
        let jobs_pg = pg_pool(&settings)?;
        let redis = Redis::new(settings.redis_url.expose(), settings.dependency_timeout)
            .context("REDIS_URL is not a valid Redis URL")?;
        let broker = Arc::new(Broker::new(
            settings.amqp_url.expose(),
            keys.clone(),
            settings.dependency_timeout,
            settings.delivery_limit,
        ));
        let jobs_counter = DurableCounter::new(redis.clone(), jobs_pg.clone(), keys.clone());
        let jobs_sequences = Sequences::new(jobs_counter.clone(), jobs_pg.clone(), opts.clock.clone());
        let sequences = Sequences::new(
            DurableCounter::new(redis.clone(), pg.clone(), keys.clone()),
            pg.clone(),
            opts.clock.clone(),
        );
        if settings.migrate_on_start && mode.serves_http() {
            migrate(&jobs_pg, &jobs_sequences, &settings).await?;
        } else if let Err(e) = jobs_sequences.ensure_order_rule(settings.time_zone).await {
            tracing::warn!(error = %format!("{e:#}"), "could not check the default order rule");
        }
        let cache = Arc::new(VoucherCache::default());
        if let Err(e) = cache.reload(&jobs_pg, true).await {
            tracing::warn!(error = %format!("{e:#}"), "voucher cache not loaded yet; retrying in the background");
        }
        let admission = Arc::new(crate::http::admission::Admission::new(&settings));
        let stop = CancellationToken::new();
        let instance = uuid::Uuid::new_v4().simple().to_string();
        let locks = crate::lock::LockService::start(
            redis.clone(),
            keys.clone(),
            &instance,
            settings.lock_lease,
            stop.clone(),
        );
        let user_serializer = crate::lock::user::UserSerializer::new(locks.clone(), settings.user_lock_wait);
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let lifecycle = crate::order::lifecycle::Lifecycle {
            pg: pg.clone(),
            redis: redis.clone(),
            keys: keys.clone(),
        };
        let ids = IdWorker::new(jobs_counter, opts.clock.clone(), settings.id_block);
        if mode.serves_http() {
            if let Err(e) = ids.warm_up().await {
                tracing::warn!(error = %format!("{e:#}"), "no order id block yet; the first order fetches one");
            }
        }
        let state = Arc::new(AppState {
            ids,
            settings,
            pg,
            jobs_pg: jobs_pg.clone(),
            redis,
            keys,
            cache,
            clock: opts.clock.clone(),
            broker,
            sequences,
            instance,
            admission,
            locks,
            user_serializer,
            lifecycle,
            metrics: metrics.clone(),
        });

        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(cache::follow(
            state.cache.clone(),
            state.jobs_pg.clone(),
            state.redis.clone(),
            state.keys.clone(),
            stop.clone(),
        )));
        {
            let (admission, stop) = (state.admission.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let mut every = tokio::time::interval(Duration::from_secs(60));
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = every.tick() => admission.forget_idle(),
                    }
                }
            }));
        }
        if mode.relays() && opts.relay {
            let relay = Relay::new(
                &state.redis,
                state.keys.clone(),
                state.cache.clone(),
                state.broker.clone(),
                format!("relay-{}", state.instance),
                &state.settings,
                state.metrics.clone(),
            );
            let stop = stop.clone();
            tasks.push(tokio::spawn(async move { relay.run(stop).await }));
        }
        let worker = (mode.works() && opts.worker).then(|| {
            Arc::new(Worker::new(
                state.jobs_pg.clone(),
                jobs_sequences.clone(),
                state.broker.clone(),
                &state.settings,
                state.metrics.clone(),
            ))
        });
        {
            // On one instance: rebuild flash sales whose Redis state was lost.
            let rebuilder = Arc::new(crate::voucher::rebuild::Rebuilder {
                redis: state.redis.clone(),
                keys: state.keys.clone(),
                pg: state.jobs_pg.clone(),
                cache: state.cache.clone(),
                broker: state.broker.clone(),
                quiet: Duration::from_millis(500),
            });
            let (locks, stop) = (state.locks.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                crate::lock::singleton::run(locks, "stock-rebuild", Duration::from_secs(1), stop, || {
                    let r = rebuilder.clone();
                    async move { r.round().await.map(|_| ()) }
                })
                .await
            }));
        }
        if let Some(w) = &worker {
            let (w, worker_stop) = (w.clone(), stop.clone());
            tasks.push(tokio::spawn(async move { w.run(worker_stop).await }));
            // Background work uses the background pool.
            let jobs = crate::order::lifecycle::Lifecycle {
                pg: state.jobs_pg.clone(),
                ..state.lifecycle.clone()
            };
            tasks.push(tokio::spawn(crate::worker::timeout::run(
                state.broker.clone(),
                jobs.clone(),
                stop.clone(),
            )));
            tasks.push(tokio::spawn(recovery(state.clone(), jobs, stop.clone())));
        }

        let (port, server) = if mode.serves_http() {
            let listener = TcpListener::bind(&state.settings.http_addr)
                .with_context(|| format!("binding {}", state.settings.http_addr))?;
            let port = listener.local_addr()?.port();
            tracing::info!(addr = %listener.local_addr()?, "listening");
            let server = http_server(state.clone(), listener)?;
            let handle = server.handle();
            (Some(port), Some((handle, tokio::spawn(server))))
        } else {
            (None, None)
        };
        Ok(Self {
            port,
            server,
            tasks,
            stop,
            state,
        })
    }

    /// The port the API listens on (None for `worker`).
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    pub fn state(&self) -> &Arc<AppState> {
        &self.state
    }

    /// Cancelling it stops the background tasks (the server stops with
    /// [`Application::shutdown`]).
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Runs until SIGTERM or SIGINT, then shuts down gracefully.
    pub async fn run_until_stopped(self) -> Result<()> {
        wait_for_signal().await;
        tracing::info!("signal received; shutting down");
        self.shutdown().await;
        Ok(())
    }

    /// Stops taking requests, lets requests and batches in progress finish, and
    /// hands back what is held (unacked messages return to the queue).
    pub async fn shutdown(self) {
        if let Some((handle, join)) = self.server {
            handle.stop(true).await;
            let _ = join.await;
        }
        self.stop.cancel();
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(15), t).await;
        }
        self.state.broker.close().await;
        self.state.pg.close().await;
        self.state.jobs_pg.close().await;
        tracing::info!("stopped");
    }

    /// Stops everything at once without finishing anything (crash tests).
    pub async fn abort(self) {
        if let Some((handle, join)) = self.server {
            join.abort();
            handle.stop(false).await;
        }
        self.stop.cancel();
        for t in self.tasks {
            t.abort();
        }
    }
}

/// On one instance at a time: finish stock returns a crash interrupted, and cancel
/// unpaid orders whose timeout message was lost (a minute past their window).
async fn recovery(state: Arc<AppState>, jobs: crate::order::lifecycle::Lifecycle, stop: CancellationToken) {
    let every = Duration::from_secs(5);
    crate::lock::singleton::run(state.locks.clone(), "order-recovery", every, stop, || {
        let (jobs, state) = (jobs.clone(), state.clone());
        async move {
            let returned = jobs.recover_returns(every).await?;
            let grace = chrono::Duration::from_std(state.settings.payment_window + Duration::from_secs(60))?;
            let swept = jobs.sweep_unpaid(state.clock.now() - grace).await?;
            if returned + swept > 0 {
                tracing::info!(
                    returned,
                    swept,
                    "recovery finished stock returns and cancelled overdue orders"
                );
            }
            Ok(())
        }
    })
    .await
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

fn http_server(state: Arc<AppState>, listener: TcpListener) -> Result<actix_web::dev::Server> {
    let jwt = web::Data::new(JwtKeys::new(state.settings.jwt_secret.expose()));
    let limit = state.settings.body_limit;
    let admission = web::Data::from(state.admission.clone());
    let state = web::Data::from(state);
    let server = HttpServer::new(move || {
        App::new()
            .wrap(actix_web::middleware::from_fn(crate::http::admission::admit))
            .wrap(TracingLogger::<crate::http::request_span::RequestSpan>::new())
            .app_data(state.clone())
            .app_data(admission.clone())
            .app_data(jwt.clone())
            .app_data(web::JsonConfig::default().limit(limit).error_handler(json_error))
            .app_data(web::PayloadConfig::new(limit))
            .app_data(web::PathConfig::default().error_handler(path_error))
            .app_data(web::QueryConfig::default().error_handler(query_error))
            .route("/health/live", web::get().to(health::live))
            .route("/health/ready", web::get().to(health::ready))
            .route("/metrics", web::get().to(health::metrics))
            .configure(crate::http::openapi::configure)
            .service(
                // The order routes first: actix-router tries patterns in the order
                // they were registered, and the order endpoint is the hot one.
                web::scope("/api/v1")
                    .configure(crate::order::configure)
                    .configure(crate::voucher::routes::configure)
                    .configure(crate::sequence::routes::configure),
            )
            .default_service(web::to(not_found))
    })
    .listen(listener)?
    // Signals are ours: shutdown also stops the relay and worker in order.
    .disable_signals()
    .shutdown_timeout(10)
    .run();
    Ok(server)
}

fn json_error(err: JsonPayloadError, _: &HttpRequest) -> actix_web::Error {
    let e = match &err {
        JsonPayloadError::Overflow { .. } | JsonPayloadError::OverflowKnownLength { .. } => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "the request body is too large",
        ),
        JsonPayloadError::ContentType => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as application/json",
        ),
        other => ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            format!("the body is not valid JSON: {other}"),
        ),
    };
    e.into()
}

fn path_error(err: PathError, _: &HttpRequest) -> actix_web::Error {
    ApiError::validation("path", err).into()
}

fn query_error(err: QueryPayloadError, _: &HttpRequest) -> actix_web::Error {
    ApiError::validation("query", err).into()
}

async fn not_found(req: HttpRequest) -> Result<actix_web::HttpResponse, ApiError> {
    use actix_web::HttpMessage;
    req.extensions_mut().insert(crate::http::admission::Unmatched);
    Err(ApiError::not_found(
        "not_found",
        format!("no route for {} {}", req.method(), req.path()),
    ))
}
