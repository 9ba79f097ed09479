//! Following a Postgres promotion. `DATABASE_URL` names the primary;
//! `SECKILL_DATABASE_STANDBY_URLS` (comma-separated) names the standbys that may
//! be promoted in its place. sqlx takes one host per pool, so a task of the
//! process probes the server its pools point at once a second and, when it does
//! not answer or answers that it is in recovery (a standby), looks for the
//! listed server that answers `pg_is_in_recovery() = false` and points every
//! pool at it. Connections already open stay where they are until they fail
//! (a crashed primary's fail at once); new ones go to the new primary.
//!
//! Whether an order committed on the old primary is on the new one is the
//! replication's business, not this task's: with a synchronous standby
//! (`synchronous_commit = on`) a commit returns only once the standby has its
//! WAL, so a promoted standby has every commit the worker was told of.
use anyhow::{Context, Result};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{Connection, PgPool};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often the server in use is asked whether it is still the primary.
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// Probes the servers (`servers[0]` first in use) and moves `pools` to the
/// primary when the one in use stops being it, until `stop`.
pub async fn follow(servers: Vec<PgConnectOptions>, pools: Vec<PgPool>, timeout: Duration, stop: CancellationToken) {
    let mut current = 0;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(PROBE_EVERY) => {}
        }
        if let Ok(false) = in_recovery(&servers[current], timeout).await {
            continue;
        }
        for i in (1..servers.len()).map(|k| (current + k) % servers.len()) {
            if let Ok(false) = in_recovery(&servers[i], timeout).await {
                for pool in &pools {
                    pool.set_connect_options(servers[i].clone());
                }
                tracing::warn!(
                    from = current,
                    to = i,
                    "the Postgres in use is down or a standby: new connections go to the listed server that is primary"
                );
                current = i;
                break;
            }
        }
    }
}

/// `SELECT pg_is_in_recovery()` on a connection of its own.
async fn in_recovery(server: &PgConnectOptions, timeout: Duration) -> Result<bool> {
    let probe = async {
        let mut conn = PgConnection::connect_with(server).await.context("connecting")?;
        let standby: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
            .fetch_one(&mut conn)
            .await
            .context("asking pg_is_in_recovery()")?;
        let _ = conn.close().await;
        Ok(standby)
    };
    tokio::time::timeout(timeout, probe).await.context("timed out")?
}
