//! The board's listener on [`CHANNEL`].
use super::board::{parse, Board, CHANNEL, PING_EVERY};
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Listens to [`CHANNEL`] for `board` until `stop`: live while it hears every
/// announcement (see the module above), reconnecting when it does not.
pub async fn follow(board: Arc<Board>, pg: PgPool, stop: CancellationToken) {
    let me = uuid::Uuid::new_v4().simple().to_string();
    loop {
        match listen(&board, &pg, &me, &stop).await {
            Ok(()) => {
                board.set_live(false);
                return;
            }
            Err(e) => {
                board.set_live(false);
                tracing::warn!(error = %format!("{e:#}"), "the status board stopped hearing order changes; polls read Postgres until it hears them again");
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(PING_EVERY) => {}
        }
    }
}

/// One connection's listening: Ok when stopped, Err when it no longer hears.
async fn listen(board: &Board, pg: &PgPool, me: &str, stop: &CancellationToken) -> anyhow::Result<()> {
    use anyhow::Context;
    let mut listener = PgListener::connect_with(pg).await.context("connecting the listener")?;
    listener.listen(CHANNEL).await.context("LISTEN")?;
    board.set_live(true);
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut sent, mut heard) = (0u64, 0u64);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = ping.tick() => {
                // The last ping has not come back: announcements may be lost too.
                if sent > heard {
                    anyhow::bail!("ping {sent} not heard back within {PING_EVERY:?}");
                }
                sent += 1;
                sqlx::query("SELECT pg_notify($1, $2)")
                    .bind(CHANNEL)
                    .bind(format!("ping {me} {sent}"))
                    .execute(pg)
                    .await
                    .context("sending a ping")?;
            }
            n = listener.try_recv() => {
                let Some(n) = n.context("receiving")? else {
                    anyhow::bail!("the listener's connection was lost");
                };
                match parse(n.payload()) {
                    Some(rows) => board.changed(&rows),
                    None => {
                        if let Some(k) = n.payload().strip_prefix("ping ").and_then(|p| p.strip_prefix(me)) {
                            heard = heard.max(k.trim().parse().unwrap_or(0));
                        }
                    }
                }
            }
        }
    }
}
