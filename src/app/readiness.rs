//! Readiness and the outbox gauge, computed by a background task (readiness once a
//! second, the gauge every fifth time) and served from memory: a flood of `GET /health/ready` or `GET /metrics`
//! costs no Postgres connection and no Redis command (before, each call ran
//! `SELECT 1` on the handlers' pool and one `XLEN` per shard of every flash sale
//! ever created, and a flood drained the pool that pay, cancel and admin need).
use crate::http::report::Report;
use crate::http::state::AppState;
use chrono::Utc;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long one dependency check may take.
const CHECK_TIMEOUT: Duration = Duration::from_millis(1500);
/// How often the checks run.
const EVERY: Duration = Duration::from_secs(1);
/// The backlog gauge is read every this many checks: it costs one `XLEN` per shard
/// of every running sale, and a gauge scraped every few seconds needs no more.
const BACKLOG_EVERY: u32 = 5;
/// How long after its end a sale's outbox still counts in the backlog gauge: long
/// enough for the relay to drain what was admitted in its last seconds.
const ENDED_GRACE: chrono::Duration = chrono::Duration::minutes(5);

/// Runs the checks, and the backlog gauge too when `backlog`.
pub async fn refresh(state: &AppState, backlog: bool) {
    let gauge = async {
        if backlog {
            outbox_backlog(state).await
        } else {
            None
        }
    };
    let (report, backlog) = tokio::join!(check(state), gauge);
    // Read now: the fullest master's share of its limit (0 without a limit).
    if let Some(m) = report.masters.as_ref() {
        let permille = m.memory_used_permille.unwrap_or(0);
        state.metrics.redis_memory_used_ratio.set(permille as f64 / 1000.0);
    }
    state.http.readiness.set(report);
    if let Some(n) = backlog {
        state.metrics.outbox_backlog.set(n);
    }
}

/// [`refresh`] every second (the gauge every [`BACKLOG_EVERY`]) until `stop`.
pub async fn run(state: Arc<AppState>, stop: CancellationToken) {
    for tick in 1u32.. {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(EVERY) => refresh(&state, tick.is_multiple_of(BACKLOG_EVERY)).await,
        }
    }
}

async fn check(state: &AppState) -> Report {
    // The background pool: the checks never take a connection a handler waits for.
    let pg = async {
        sqlx::query("SELECT 1").execute(&state.handles.background_pg).await?;
        anyhow::Ok(())
    };
    let redis = async {
        let mut conn = state.handles.redis.conn().await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await?;
        // A cluster must serve every slot, and every master must answer.
        if state.handles.redis.is_cluster() {
            state.handles.redis.current_identity().await?;
        }
        anyhow::Ok(())
    };
    let amqp = state.handles.broker.check();
    let masters = state.handles.redis.master_facts();
    let (pg, redis, amqp, masters) = tokio::join!(
        tokio::time::timeout(CHECK_TIMEOUT, pg),
        tokio::time::timeout(CHECK_TIMEOUT, redis),
        tokio::time::timeout(CHECK_TIMEOUT, amqp),
        tokio::time::timeout(CHECK_TIMEOUT, masters),
    );
    let up = |r: &Result<anyhow::Result<()>, _>| matches!(r, Ok(Ok(())));
    Report {
        checks: vec![("postgres", up(&pg)), ("redis", up(&redis)), ("rabbitmq", up(&amqp))],
        masters: masters.ok().and_then(Result::ok),
        checked_at: Utc::now(),
    }
}

/// Entries in the outbox streams of the sales begun and not ended (or ended in the
/// last minutes), every shard; `None` if Redis did not answer. A sale not begun has
/// admitted nothing: its streams are not read.
async fn outbox_backlog(state: &AppState) -> Option<i64> {
    let now = state.clock.now();
    let since = now - ENDED_GRACE;
    let sales: Vec<(i64, u32)> = state
        .handles
        .cache
        .flash_sales()
        .iter()
        .filter_map(|e| e.voucher.flash.as_ref().map(|f| (e.voucher.id, f)))
        .filter(|(_, f)| f.begin_at <= now && f.end_at > since)
        .map(|(id, f)| (id, f.shards()))
        .collect();
    let backlog = crate::ordering::outbox::backlog(&state.handles.redis, &state.handles.keys, sales);
    tokio::time::timeout(CHECK_TIMEOUT, backlog).await.ok()?.ok()
}
