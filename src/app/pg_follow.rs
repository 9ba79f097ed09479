//! Following a Postgres promotion. `DATABASE_URL` names the primary;
//! `SECKILL_DATABASE_STANDBY_URLS` (comma-separated) names the standbys that may
//! be promoted in its place. sqlx takes one host per pool, so the process
//! chooses the server itself: at start, and then once a second while it runs, it
//! asks each listed server whether it is a primary (`pg_is_in_recovery()`) and
//! on which timeline (a promotion starts a new, higher one), and points every
//! pool at the primary of the highest timeline it has seen. It never moves to a
//! lower timeline than the one it is on: an old primary that is still up after
//! its standby was promoted, or that comes back without having been rejoined,
//! is passed over. Connections already open stay where they are until they
//! fail (a crashed primary's fail at once); new ones go to the new primary.
//!
//! Whether an order committed on the old primary is on the new one is the
//! replication's business, not this task's: with a synchronous standby
//! (`synchronous_commit = on`) a commit returns only once the standby has its
//! WAL, so a promoted standby has every commit the worker was told of; and an
//! old primary that lives on can commit nothing once its standby is promoted
//! (it waits for a standby that no longer streams from it).
use anyhow::{Context, Result};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{Connection, PgPool};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often the listed servers are asked which is the primary.
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// A server's answer: primary or standby, and its timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Answer {
    primary: bool,
    timeline: u32,
}

/// The primary of the highest timeline among `answers` (index, timeline), if
/// it is not below `floor`.
fn choose(answers: &[Option<Answer>], floor: u32) -> Option<(usize, u32)> {
    answers
        .iter()
        .enumerate()
        .filter_map(|(i, a)| a.filter(|a| a.primary && a.timeline >= floor).map(|a| (i, a.timeline)))
        .max_by_key(|&(i, timeline)| (timeline, std::cmp::Reverse(i)))
}

/// Asks every server at once (each bounded by `timeout`).
async fn ask_all(servers: &[PgConnectOptions], timeout: Duration) -> Vec<Option<Answer>> {
    futures::future::join_all(servers.iter().map(|s| ask(s, timeout)))
        .await
        .into_iter()
        .enumerate()
        .map(|(i, answer)| {
            answer
                .map_err(|e| tracing::debug!(server = i, error = %format!("{e:#}"), "Postgres server not reached"))
                .ok()
        })
        .collect()
}

/// Points `pools` at the primary of the highest timeline before the process
/// uses them (its migrations included); `servers[0]` (DATABASE_URL) if none
/// answers now. Returns the server chosen and its timeline (0: none answered).
pub async fn start(servers: &[PgConnectOptions], pools: &[PgPool], timeout: Duration) -> (usize, u32) {
    match choose(&ask_all(servers, timeout).await, 0) {
        Some((i, timeline)) => {
            if i != 0 {
                for pool in pools {
                    pool.set_connect_options(servers[i].clone());
                }
                tracing::warn!(
                    server = i,
                    timeline,
                    "DATABASE_URL's server is not the primary: using the listed server that is"
                );
            }
            (i, timeline)
        }
        None => (0, 0),
    }
}

/// Probes the servers once a second and moves `pools` to the primary of the
/// highest timeline when the one in use stops being it, until `stop`.
pub async fn follow(
    servers: Vec<PgConnectOptions>,
    pools: Vec<PgPool>,
    timeout: Duration,
    (mut current, mut timeline): (usize, u32),
    stop: CancellationToken,
) {
    let mut unanswered = vec![false; servers.len()];
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(PROBE_EVERY) => {}
        }
        let answers = ask_all(&servers, timeout).await;
        for (i, a) in answers.iter().enumerate() {
            // Said once per change: a standby's wrong password shows before a failover needs it.
            if a.is_none() != unanswered[i] {
                unanswered[i] = a.is_none();
                if a.is_none() {
                    tracing::warn!(server = i, "a listed Postgres server does not answer");
                } else {
                    tracing::info!(server = i, "a listed Postgres server answers again");
                }
            }
        }
        let Some((i, t)) = choose(&answers, timeline) else {
            continue;
        };
        if answers[current]
            == Some(Answer {
                primary: true,
                timeline: t,
            })
            || i == current
        {
            timeline = timeline.max(t);
            continue;
        }
        for pool in &pools {
            pool.set_connect_options(servers[i].clone());
        }
        tracing::warn!(
            from = current,
            to = i,
            timeline = t,
            "the Postgres in use is down, a standby or behind: new connections go to the primary of the highest timeline"
        );
        (current, timeline) = (i, t);
    }
}

/// Whether the server is in recovery, and its timeline (of the WAL it writes,
/// or, for a standby, replays).
async fn ask(server: &PgConnectOptions, timeout: Duration) -> Result<Answer> {
    let probe = async {
        let mut conn = PgConnection::connect_with(server).await.context("connecting")?;
        let (standby, wal_file): (bool, String) = sqlx::query_as(
            "SELECT pg_is_in_recovery(),
                    CASE WHEN pg_is_in_recovery() THEN '00000000' ELSE pg_walfile_name(pg_current_wal_lsn()) END",
        )
        .fetch_one(&mut conn)
        .await
        .context("asking pg_is_in_recovery()")?;
        let _ = conn.close().await;
        let timeline = u32::from_str_radix(wal_file.get(..8).unwrap_or("0"), 16).unwrap_or(0);
        Ok(Answer {
            primary: !standby,
            timeline,
        })
    };
    tokio::time::timeout(timeout, probe).await.context("timed out")?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn primary(timeline: u32) -> Option<Answer> {
        Some(Answer {
            primary: true,
            timeline,
        })
    }

    #[test]
    fn the_primary_of_the_highest_timeline_is_chosen_never_a_lower_one() {
        let standby = Some(Answer {
            primary: false,
            timeline: 0,
        });
        // The old primary (timeline 1) lives on beside the promoted standby (2).
        assert_eq!(choose(&[primary(1), primary(2)], 0), Some((1, 2)));
        assert_eq!(choose(&[primary(1), primary(2)], 2), Some((1, 2)));
        // The promoted one is down: the old one is not gone back to.
        assert_eq!(choose(&[primary(1), None], 2), None);
        // At start, DATABASE_URL's primary with its standby.
        assert_eq!(choose(&[primary(1), standby], 0), Some((0, 1)));
        assert_eq!(choose(&[None, standby], 0), None);
        // Two primaries on one timeline (never both promoted from one): the first listed.
        assert_eq!(choose(&[primary(3), primary(3)], 0), Some((0, 3)));
    }
}
