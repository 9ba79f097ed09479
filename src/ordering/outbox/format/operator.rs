//! What an operator does with the fence (`seckill outbox-formats`): list the
//! decision and the announced processes, declare a crashed process gone, lower
//! the decision for a rollback.
use super::decision::decision;
use anyhow::{Context, Result};
use sqlx::PgPool;
use std::time::Duration;

/// One announced process, as `seckill outbox-formats` lists it.
#[derive(Debug, sqlx::FromRow)]
pub struct Announced {
    pub process: String,
    pub reads: i32,
    pub mode: String,
    pub host: String,
    pub pid: i32,
    pub started_at: chrono::DateTime<chrono::Utc>,
    pub seen_at: chrono::DateTime<chrono::Utc>,
}

/// The decision and the announced processes, oldest first.
pub async fn list(pg: &PgPool) -> Result<(u32, String, Vec<Announced>)> {
    let (writes, by): (i32, String) = sqlx::query_as("SELECT writes, decided_by FROM outbox_format")
        .fetch_one(pg)
        .await
        .context("reading the outbox format decision")?;
    let procs = sqlx::query_as::<_, Announced>(
        "SELECT process, reads, mode, host, pid, started_at, seen_at FROM outbox_processes ORDER BY started_at, process",
    )
    .fetch_all(pg)
    .await
    .context("reading the outbox format announcements")?;
    Ok((writes as u32, by, procs))
}

/// How recently a process must have renewed its announcement for `forget` to
/// refuse it without `--force` (it looks alive: an operator's check, not what
/// keeps entries readable).
pub const LOOKS_ALIVE: Duration = Duration::from_secs(30);

/// Declares a process gone (it crashed: its announcement would hold the decision
/// back forever). Whether it was announced. Refused for a process that renewed
/// its announcement within [`LOOKS_ALIVE`], unless `force`.
pub async fn forget(pg: &PgPool, process: &str, force: bool) -> Result<bool> {
    let seen: Option<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM now() - seen_at)::float8 FROM outbox_processes WHERE process = $1",
    )
    .bind(process)
    .fetch_optional(pg)
    .await
    .context("reading the process's announcement")?;
    let Some(seen) = seen else { return Ok(false) };
    anyhow::ensure!(
        force || seen >= LOOKS_ALIVE.as_secs_f64(),
        "{process} renewed its announcement {seen:.0} s ago: it looks alive (stop it, or pass --force)"
    );
    let r = sqlx::query("DELETE FROM outbox_processes WHERE process = $1")
        .bind(process)
        .execute(pg)
        .await
        .context("declaring the process gone")?;
    Ok(r.rows_affected() == 1)
}

/// Lowers the decision to `to` (a rollback to a binary that reads only up to
/// `to`), refused while any announced process reads a newer format: such a
/// process may still write one (stop it first, or declare it gone).
pub async fn lower(pg: &PgPool, to: u32, by: &str) -> Result<()> {
    anyhow::ensure!(to >= 1, "the oldest format is 1");
    let mut tx = pg.begin().await.context("lowering the outbox format")?;
    let decided = decision(&mut tx).await?;
    anyhow::ensure!(
        to <= decided,
        "outbox format {decided} is decided; lowering is to an older one"
    );
    let newer: Vec<String> =
        sqlx::query_scalar("SELECT process FROM outbox_processes WHERE reads > $1 ORDER BY process")
            .bind(to as i32)
            .fetch_all(&mut *tx)
            .await
            .context("reading the outbox format announcements")?;
    anyhow::ensure!(
        newer.is_empty(),
        "processes that read and write formats newer than {to} are announced (stop them, or declare them gone): {}",
        newer.join(", ")
    );
    sqlx::query("UPDATE outbox_format SET writes = $1, decided_at = now(), decided_by = $2")
        .bind(to as i32)
        .bind(by)
        .execute(&mut *tx)
        .await
        .context("lowering the outbox format")?;
    tx.commit().await.context("lowering the outbox format")?;
    Ok(())
}
