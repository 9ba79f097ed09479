//! The fence's decision (`outbox_format.writes`: the format writers write), read
//! with its row held, and why a process's announcement is refused.
use anyhow::{Context, Result};

/// Why an announcement was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The decision is past what this process reads: it must not run.
    #[error(
        "outbox format {decided} is being written, and this process reads formats up to {reads} only: \
         it would park every new outbox entry. Run a newer binary (or, to roll back, stop every newer \
         process and run `seckill outbox-formats lower --to {reads}`)"
    )]
    TooOld { decided: u32, reads: u32 },
    /// Postgres did not answer: try again.
    #[error(transparent)]
    Unreachable(#[from] anyhow::Error),
}

/// The decision, its row held until the transaction ends. The transaction reads
/// committed rows statement by statement (set here, whatever the server's
/// default): what it reads after this lock includes every announcement that
/// committed while it waited for it.
pub async fn decision(tx: &mut sqlx::PgConnection) -> Result<u32> {
    sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .execute(&mut *tx)
        .await
        .context("reading the outbox format decision")?;
    let decided: i32 = sqlx::query_scalar("SELECT writes FROM outbox_format FOR UPDATE")
        .fetch_one(tx)
        .await
        .context("reading the outbox format decision")?;
    Ok(decided.max(1) as u32)
}
