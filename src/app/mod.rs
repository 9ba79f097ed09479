//! Builds the application: [`state::connect`] (connections and shared services),
//! [`tasks::spawn_all`] (background tasks, each owned), [`server::http_server`]
//! (routes), and the shutdown that stops them in order within one deadline.
//!
//! [`Application::build`] binds its own listener (port 0 picks a free one, see
//! [`Application::port`]), so tests start the real application in-process.
mod mode;
mod pg_follow;
pub mod readiness;
mod server;
mod state;
mod tasks;

pub use crate::http::state::AppState;
pub use mode::{Mode, Options};
pub use state::{migrate, pg_pool};

use crate::config::Settings;
use actix_web::dev::ServerHandle;
use anyhow::{Context, Result};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;
use tasks::Tasks;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long a graceful shutdown may take in all, after the HTTP server stopped.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(15);

/// The HTTP server's handle and its task.
type Server = (ServerHandle, JoinHandle<std::io::Result<()>>);

pub struct Application {
    port: Option<u16>,
    server: Option<Server>,
    tasks: Tasks,
    stop: CancellationToken,
    state: Arc<AppState>,
}

impl Application {
    pub async fn build(settings: Settings, mode: Mode) -> Result<Self> {
        Self::build_with(settings, mode, Options::default()).await
    }

    pub async fn build_with(settings: Settings, mode: Mode, opts: Options) -> Result<Self> {
        if mode.serves_http() {
            settings.check_bind()?;
        }
        if settings.auth.jwt_secret_is_dev && mode.serves_http() {
            tracing::warn!("SECKILL_JWT_SECRET is not set: using the DEVELOPMENT secret; anyone can mint tokens. Never run this in production.");
        }
        let stop = CancellationToken::new();
        let connected = state::connect(settings, mode, &opts, &stop).await?;
        let state = connected.state;
        match Self::start(state.clone(), connected.background_sequences, mode, &opts, stop.clone()).await {
            Ok((port, server, tasks)) => Ok(Self {
                port,
                server,
                tasks,
                stop,
                state,
            }),
            Err(e) => {
                // Nothing of it runs: its announcement of the outbox formats goes
                // (left, it would hold the format back like a crashed process's).
                stop.cancel();
                state.recovery.formats.deregister().await;
                Err(e)
            }
        }
    }

    /// The tasks and the HTTP server of a connected process.
    async fn start(
        state: Arc<AppState>,
        background_sequences: crate::numbers::Sequences,
        mode: Mode,
        opts: &Options,
        stop: CancellationToken,
    ) -> Result<(Option<u16>, Option<Server>, Tasks)> {
        let mut tasks = Tasks::default();
        tasks::spawn_all(&mut tasks, &state, mode, opts, background_sequences, &stop);
        let (port, server) = if mode.serves_http() {
            // Readiness is served from memory: have a first answer before listening.
            readiness::refresh(&state, true).await;
            let listener = TcpListener::bind(&state.settings.http.http_addr)
                .with_context(|| format!("binding {}", state.settings.http.http_addr))?;
            let port = listener.local_addr()?.port();
            tracing::info!(addr = %listener.local_addr()?, "listening");
            let server = server::http_server(state.clone(), listener)?;
            let handle = server.handle();
            (Some(port), Some((handle, tokio::spawn(server))))
        } else {
            (None, None)
        };
        Ok((port, server, tasks))
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

    /// Runs until SIGTERM or SIGINT, then shuts down gracefully. A background task
    /// that ends on its own (it should not: each runs until stopped) is reported and
    /// stops the process too, with an error, so that its supervisor restarts it
    /// rather than leaving it half alive.
    pub async fn run_until_stopped(mut self) -> Result<()> {
        let failure = tokio::select! {
            _ = server::signal() => {
                tracing::info!("signal received; shutting down");
                None
            }
            failure = self.tasks.first_ended() => {
                tracing::error!(failure = %failure, "shutting down");
                Some(failure)
            }
        };
        self.shutdown().await;
        match failure {
            Some(f) => anyhow::bail!(f),
            None => Ok(()),
        }
    }

    /// Stops taking requests, lets requests and batches in progress finish, and
    /// hands back what is held (unacked messages return to the queue); what is
    /// still running at the deadline is aborted before the pools close.
    pub async fn shutdown(self) {
        // Held long polls answer now, with the status as it is: the server's
        // graceful stop waits for requests in flight.
        self.state.ordering.lookup.board.closing.cancel();
        if let Some((handle, join)) = self.server {
            handle.stop(true).await;
            let _ = join.await;
        }
        self.stop.cancel();
        let deadline = tokio::time::Instant::now() + SHUTDOWN_DEADLINE;
        self.tasks.stop(SHUTDOWN_DEADLINE).await;
        // Nothing of this process reads or writes outbox entries any more.
        self.state.recovery.formats.deregister().await;
        // Lock watchdogs and releases, id block fetches: the rest of the same deadline.
        for tracker in [self.state.handles.locks.tasks(), self.state.handles.ids.tasks()] {
            tracker.close();
            if tokio::time::timeout_at(deadline, tracker.wait()).await.is_err() {
                tracing::warn!(left = tracker.len(), "tasks still running at the shutdown deadline");
            }
        }
        self.state.handles.broker.close().await;
        self.state.handles.pg.close().await;
        self.state.handles.background_pg.close().await;
        tracing::info!("stopped");
    }

    /// Stops everything at once without finishing anything (crash tests), and
    /// closes its connections as the end of a killed process would: a transaction
    /// an aborted task left open (sqlx rolls a dropped one back only when the
    /// connection is used again) must not keep its row locks, nor a consumer its
    /// unacknowledged deliveries, for as long as the test lives.
    pub async fn abort(self) {
        if let Some((handle, join)) = self.server {
            join.abort();
            handle.stop(false).await;
        }
        self.stop.cancel();
        self.tasks.abort();
        let close = async {
            self.state.handles.broker.close().await;
            self.state.handles.pg.close().await;
            self.state.handles.background_pg.close().await;
        };
        let _ = tokio::time::timeout(SHUTDOWN_DEADLINE, close).await;
    }
}
