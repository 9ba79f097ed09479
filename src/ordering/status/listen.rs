//! The board's listener on [`CHANNEL`], and its pings.
//!
//! Every [`PING_EVERY`] the listener sends a ping on the channel (from a task of
//! its own, so that a slow one never holds up the notifications) and, hearing it
//! back, tells the board when it was sent: every change committed before then was
//! heard. The board serves only while that is at most [`MAX_STALE`] ago; past
//! [`RECONNECT_AFTER`] without a ping back, the listener starts again on a new
//! connection.
use super::announce::parse;
use super::board::{Board, CHANNEL, MAX_STALE, PING_EVERY};
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How long the listener goes without hearing a ping back before it reconnects.
pub const RECONNECT_AFTER: Duration = Duration::from_secs(3);

/// Listens to [`CHANNEL`] for `board` until `stop`: the board live while it hears
/// every announcement (see the module above), reconnecting when it does not.
pub async fn follow(board: Arc<Board>, pg: PgPool, stop: CancellationToken) {
    let me = uuid::Uuid::new_v4().simple().to_string();
    for connection in 0u64.. {
        let name = format!("{me}.{connection}");
        let result = tokio::select! {
            _ = stop.cancelled() => Ok(()),
            r = listen(&board, &pg, &name) => r,
        };
        board.set_live(false);
        match result {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "the status board stopped hearing order changes; polls read Postgres until it hears them again")
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(PING_EVERY) => {}
        }
    }
}

/// One connection's listening (pings named `ping <me> <k>`): Err when it no
/// longer hears.
async fn listen(board: &Board, pg: &PgPool, me: &str) -> anyhow::Result<()> {
    use anyhow::Context;
    let mut listener = PgListener::connect_with(pg).await.context("connecting the listener")?;
    // A lost connection ends this one (the board is emptied, a new one starts):
    // no silent reconnect inside `try_recv`, which could miss what was announced
    // in between.
    listener.eager_reconnect(false);
    listener.listen(CHANNEL).await.context("LISTEN")?;
    board.set_live(true);
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The pings sent and not heard back yet: number, when sent.
    let mut out: VecDeque<(u64, Instant)> = VecDeque::new();
    let prefix = format!("ping {me} ");
    let mut k = 0u64;
    loop {
        k += 1;
        loop {
            tokio::select! {
                _ = ping.tick() => break,
                n = listener.try_recv() => {
                    let Some(n) = n.context("receiving")? else {
                        anyhow::bail!("the listener's connection was lost");
                    };
                    let payload = n.payload();
                    if let Some(heard) = payload.strip_prefix(&prefix).and_then(|p| p.parse::<u64>().ok()) {
                        while let Some(&(j, sent)) = out.front().filter(|(j, _)| *j <= heard) {
                            out.pop_front();
                            if j == heard {
                                board.heard(sent);
                            }
                        }
                    } else if let Some(rows) = parse(payload) {
                        board.changed(&rows);
                    } else if !payload.starts_with("ping ") {
                        // An announcement this build cannot read (a trigger of another
                        // version): as good as lost. The board is emptied, and serves
                        // nothing until it hears only what it reads.
                        anyhow::bail!("an announcement this build cannot read: {}", payload.chars().take(80).collect::<String>());
                    }
                }
            }
        }
        if let Some(&(j, sent)) = out.front() {
            if sent.elapsed() > RECONNECT_AFTER {
                anyhow::bail!("ping {j} not heard back within {RECONNECT_AFTER:?}");
            }
        }
        out.push_back((k, Instant::now()));
        let (pg, payload) = (pg.clone(), format!("{prefix}{k}"));
        tokio::spawn(async move {
            let send = sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CHANNEL)
                .bind(payload)
                .execute(&pg);
            // Not heard back in time, it only leaves the board stale (serving nothing).
            let _ = tokio::time::timeout(MAX_STALE, send).await;
        });
    }
}
