//! The background tasks: every one owned by one `JoinSet`, named, reported if it
//! ends before the process stops, and stopped together within one deadline
//! ([`Tasks`]); which tasks a mode starts, in which order ([`spawn_all`]).
use super::mode::{Mode, Options};
use crate::http::state::AppState;
use crate::numbers::Sequences;
use crate::ordering::outbox::relay::Relay;
use crate::ordering::worker::Worker;
use crate::sales::cache;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

mod queues;
mod set;
pub use set::Tasks;

/// Starts the background tasks of `mode`.
pub fn spawn_all(
    tasks: &mut Tasks,
    state: &Arc<AppState>,
    mode: Mode,
    opts: &Options,
    background_sequences: Sequences,
    stop: &CancellationToken,
) {
    spawn_followers(tasks, state, mode, stop);
    spawn_admission(tasks, state, mode, stop);
    if mode.relays() && opts.relay {
        spawn_relay(tasks, state, stop);
    }
    let worker = (mode.works() && opts.worker).then(|| worker(state, &background_sequences));
    spawn_every_process(tasks, state, stop);
    if mode.serves_http() {
        spawn_watches(tasks, state, stop);
    }
    spawn_worker(tasks, state, worker, stop);
}

/// The tasks that keep this process's copies current (lock releases, the voucher
/// cache, the identity provider's keys, pauses) and sweep idempotency keys.
fn spawn_followers(tasks: &mut Tasks, state: &Arc<AppState>, mode: Mode, stop: &CancellationToken) {
    tasks.spawn("lock releases", state.handles.locks.follow_releases(stop.clone()));
    tasks.spawn(
        "voucher cache",
        cache::follow(
            state.handles.cache.clone(),
            state.handles.background_pg.clone(),
            state.handles.redis.clone(),
            state.handles.keys.clone(),
            stop.clone(),
        ),
    );
    if let Some(jwks) = state.http.jwt.jwks().filter(|_| mode.serves_http()) {
        tasks.spawn("identity provider keys", jwks.clone().run(stop.clone()));
    }
    if mode.serves_http() {
        // Pauses reach this instance's order handler within a second even if their
        // event is lost.
        let (cache, pg) = (state.handles.cache.clone(), state.handles.background_pg.clone());
        tasks.spawn("voucher pauses", cache::watch_pauses(cache, pg.clone(), stop.clone()));
        // Owners' answers kept until Postgres announces their order's change.
        let board = state.ordering.lookup.board.clone();
        tasks.spawn(
            "status board",
            crate::ordering::status::listen::follow(board, pg, stop.clone()),
        );
        tasks.spawn(
            "idempotency keys",
            crate::http::idempotency::sweep(state.handles.background_pg.clone(), stop.clone()),
        );
    }
}

/// The tasks of fair admission: queue frontiers and raffle draws (HTTP modes), and
/// the admission sweeper (every mode).
fn spawn_admission(tasks: &mut Tasks, state: &Arc<AppState>, mode: Mode, stop: &CancellationToken) {
    if mode.serves_http() {
        // Every running queue moves at its rate whether or not anyone polls this
        // instance (the advance counts from the last move, whoever made it).
        let (state, stop) = (state.clone(), stop.clone());
        tasks.spawn("queue frontiers", async move {
            let mut every = tokio::time::interval(crate::admission::frontier::REFRESH);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = every.tick() => queues::advance_running_queues(&state).await,
                }
            }
        });
    }
    if mode.serves_http() {
        // Raffles past draw_at are closed, and drawn once their beacon round is in,
        // here and never in a request (every instance tries; one does each).
        let (pg, stop) = (state.handles.background_pg.clone(), stop.clone());
        let beacon = state.settings.sales.beacon_url.clone();
        let timeout = state.settings.services.dependency_timeout;
        tasks.spawn("raffle draws", async move {
            let http = reqwest::Client::builder().timeout(timeout).build().unwrap_or_default();
            let mut every = tokio::time::interval(crate::admission::raffle::SUMMARY_REFRESH);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = every.tick() => {}
                }
                if let Err(e) = crate::admission::draw::settle_due(&pg).await {
                    tracing::debug!(error = ?e, "raffles not settled this tick");
                }
                if let Some(beacon) = &beacon {
                    if let Err(e) = crate::admission::draw::fetch_due(&pg, &http, beacon).await {
                        tracing::debug!(error = ?e, "beacon rounds not fetched this tick");
                    }
                }
            }
        });
    }
    {
        let (admission, stop) = (state.http.rate_limits.clone(), stop.clone());
        tasks.spawn("admission sweeper", async move {
            // Often: a crowd of distinct shoppers adds a limiter entry per shopper, and an
            // entry is forgettable a second after its last request.
            let mut every = tokio::time::interval(Duration::from_secs(5));
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = every.tick() => admission.forget_idle(),
                }
            }
        });
    }
}

/// The relay from the outboxes to RabbitMQ, built now and run as a task.
fn spawn_relay(tasks: &mut Tasks, state: &Arc<AppState>, stop: &CancellationToken) {
    let relay = Relay::new(
        crate::ordering::outbox::relay::Ends {
            redis: state.handles.redis.clone(),
            broker: state.handles.broker.clone(),
            pg: state.handles.background_pg.clone(),
            recovery: state.recovery.clone(),
        },
        state.handles.keys.clone(),
        state.handles.cache.clone(),
        format!("relay-{}", state.handles.instance),
        &state.settings,
        state.metrics.clone(),
    );
    let stop = stop.clone();
    tasks.spawn("relay", async move { relay.run(stop).await });
}

/// The worker of this process, built (not started yet).
fn worker(state: &Arc<AppState>, background_sequences: &Sequences) -> Arc<Worker> {
    Arc::new(Worker::new(
        crate::ordering::worker::persist::Ctx {
            pg: state.handles.background_pg.clone(),
            sequences: background_sequences.clone(),
            keys: state.handles.keys.clone(),
        },
        state.handles.broker.clone(),
        &state.settings,
        state.metrics.clone(),
    ))
}

/// The tasks every process runs: outbox formats, clock skew, Redis recovery.
fn spawn_every_process(tasks: &mut Tasks, state: &Arc<AppState>, stop: &CancellationToken) {
    {
        // Announces the outbox formats this process reads, and raises the one
        // writers write once every announced process reads it.
        let (recovery, stop) = (state.recovery.clone(), stop.clone());
        tasks.spawn("outbox formats", async move { recovery.formats.run(stop).await });
    }
    tasks.spawn(
        "clock skew",
        state
            .handles
            .clock_skew
            .clone()
            .run(state.handles.background_pg.clone(), state.clock.clone(), stop.clone()),
    );
    {
        // Every process keeps its points current and repairs (one per sale at a time across
        // processes) the sales whose shards it found lost or behind.
        let recovery = state.recovery.clone();
        let stop = stop.clone();
        tasks.spawn("redis recovery", async move { recovery.run(stop).await });
    }
}

/// The watches of an HTTP process: readiness (and the outbox gauge), the audit of
/// the books, and the shard moves left in transit.
fn spawn_watches(tasks: &mut Tasks, state: &Arc<AppState>, stop: &CancellationToken) {
    // Readiness and the outbox gauge, once a second (GET /health/ready and
    // GET /metrics serve them from memory).
    tasks.spawn("readiness", super::readiness::run(state.clone(), stop.clone()));
    // Keeps seckill_sales_unbalanced (served at /metrics) current.
    let watch = crate::reports::Watch {
        pg: state.handles.background_pg.clone(),
        redis: state.handles.redis.clone(),
        keys: state.handles.keys.clone(),
        cache: state.handles.cache.clone(),
        clock: state.clock.clone(),
        metrics: state.metrics.clone(),
        every: state.settings.guards.audit_interval,
        recovery: state.recovery.clone(),
    };
    tasks.spawn("audit", watch.run(stop.clone()));
    // The masters' in-sync replicas, for orders that wait for them: a shard whose
    // master has fewer is refused before it reserves (see order::replication).
    let replication = &state.ordering.placer.replication;
    if replication.replicas > 0 {
        tasks.spawn(
            "replica watch",
            crate::ordering::replication::run_watch(
                state.handles.redis.clone(),
                replication.watch.clone(),
                state.settings.guards.replica_check,
                stop.clone(),
            ),
        );
    }
    // Completes the moves between a sharded sale's shards that a process left
    // in transit (see voucher::refill).
    if let Some(every) = state.settings.guards.shard_recovery_interval {
        tasks.spawn(
            "shard moves",
            crate::sales::moves::run_recovery(
                state.handles.redis.clone(),
                state.handles.keys.clone(),
                state.recovery.clone(),
                every,
                stop.clone(),
            ),
        );
    }
}

/// The worker's tasks, if this process has a worker: the worker, its heartbeat,
/// payment timeouts and order recovery.
fn spawn_worker(tasks: &mut Tasks, state: &Arc<AppState>, worker: Option<Arc<Worker>>, stop: &CancellationToken) {
    if let Some(w) = &worker {
        let (w, worker_stop) = (w.clone(), stop.clone());
        tasks.spawn("worker", async move { w.run(worker_stop).await });
        tasks.spawn(
            "worker heartbeat",
            worker
                .clone()
                .expect("worker")
                .heartbeat(crate::ordering::worker::HEARTBEAT_EVERY, stop.clone()),
        );
        // Background work uses the background pool.
        let background_lifecycle = crate::ordering::lifecycle::Lifecycle {
            pg: state.handles.background_pg.clone(),
            ..state.ordering.lifecycle.clone()
        };
        tasks.spawn(
            "payment timeouts",
            crate::ordering::worker::timeout::run(
                state.handles.broker.clone(),
                background_lifecycle.clone(),
                stop.clone(),
            ),
        );
        tasks.spawn("recovery", recovery(state.clone(), background_lifecycle, stop.clone()));
    }
}

/// On one instance at a time: finish stock returns a crash interrupted, and cancel
/// unpaid orders whose timeout message was lost (a minute past their window).
async fn recovery(
    state: Arc<AppState>,
    background_lifecycle: crate::ordering::lifecycle::Lifecycle,
    stop: CancellationToken,
) {
    let every = Duration::from_secs(5);
    crate::locks::singleton::run(state.handles.locks.clone(), "order-recovery", every, stop, || {
        let (background_lifecycle, state) = (background_lifecycle.clone(), state.clone());
        async move {
            let returned = background_lifecycle.recover_returns(every).await?;
            let topped_up = background_lifecycle.recover_topups(every).await?;
            let swept = background_lifecycle
                .sweep_unpaid(state.settings.sales.payment_window + Duration::from_secs(60))
                .await?;
            if returned + topped_up + swept > 0 {
                tracing::info!(
                    returned,
                    topped_up,
                    swept,
                    "recovery finished stock returns and cancelled overdue orders"
                );
            }
            Ok(())
        }
    })
    .await
}
