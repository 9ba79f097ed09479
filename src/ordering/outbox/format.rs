//! The formats of outbox entries, and the fence that keeps writers from writing a
//! format some live process cannot read.
//!
//! An outbox entry holds orders shoppers were told were accepted. A relay that
//! cannot read one never acknowledges it (it parks it, counts an incident and
//! leaves it for a relay that reads it: see `Relay::park_unreadable`), but during a
//! rolling upgrade an older relay would still meet every entry a newer writer
//! wrote, and those orders would wait, parked, until the older relays are gone.
//! The fence keeps that from happening:
//!
//! - every process announces, in Postgres (`outbox_processes`), the newest format
//!   it reads, before its relay reads any entry (its repairs refuse what they
//!   cannot read meanwhile), and takes its announcement away when it stops
//!   ([`Formats::register`], [`Formats::deregister`]);
//! - writers write the format of the recorded decision (`outbox_format.writes`), or
//!   their own newest if that is older; the decision is raised only to a format
//!   every announced process reads, in a transaction that holds the decision's
//!   row ([`Formats::run`]); a process cut off from the decision for three checks,
//!   or whose announcement was taken away, writes format 1 until it can read it;
//! - an announcement holds the same row and is refused when the decision is
//!   already past what the process reads: such a process stops at start (an older
//!   binary started again after the upgrade went through).
//!
//! No timeout takes part: a process that crashed keeps its announcement, and
//! holds the decision back, until an operator declares it gone (`seckill
//! outbox-formats forget PROCESS`). A process declared gone while alive finds
//! its announcement missing at its next heartbeat and announces itself again,
//! or stops if it no longer may; until then, what it cannot read it parks.
//!
//! The formats:
//! - 1: fields `v` (voucher), `b` (orders, "id,user,created_ms,..."), `s` (the
//!   shard's sequence), and no format field;
//! - 2: the same, and field `f` = the format. Entries name their format from
//!   then on, so that a later format is told apart by the stamp, not by guessing
//!   from the fields. A binary older than the fence (which announces nothing) reads
//!   a format-2 entry as format 1, rightly: the fields it reads mean the same.
use anyhow::Context;
use sqlx::PgPool;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

mod decision;
mod operator;
use decision::decision;
pub use decision::Refused;
pub use operator::{forget, list, lower, Announced, LOOKS_ALIVE};

/// The newest format this binary reads and writes (the settings' bound).
pub const NEWEST: u32 = crate::config::NEWEST_OUTBOX_FORMAT;

/// How often a process renews its announcement, tries to raise the decision and
/// reads it back.
pub const EVERY: Duration = Duration::from_secs(2);

/// This process's place in the fence: what it reads, what it writes now.
pub struct Formats {
    pg: PgPool,
    /// The process's name in `outbox_processes`.
    process: String,
    mode: &'static str,
    /// The newest format this process reads (`SECKILL_OUTBOX_FORMAT`, at most
    /// [`NEWEST`]).
    reads: u32,
    /// The format writers stamp now: the decision, at most `reads`; 1 until this
    /// process read the decision.
    writes: AtomicU32,
    /// Whether this process's announcement is recorded.
    registered: tokio::sync::watch::Sender<bool>,
    /// `seckill_outbox_format_written`.
    gauge: prometheus::IntGauge,
}

impl Formats {
    pub fn new(pg: PgPool, process: String, mode: &'static str, reads: u32, gauge: prometheus::IntGauge) -> Self {
        gauge.set(1);
        Self {
            gauge,
            pg,
            process,
            mode,
            reads: reads.clamp(1, NEWEST),
            writes: AtomicU32::new(1),
            registered: tokio::sync::watch::Sender::new(false),
        }
    }

    /// The newest format this process reads.
    pub fn reads(&self) -> u32 {
        self.reads
    }

    /// The format to write now (what the scripts stamp).
    pub fn writes(&self) -> u32 {
        self.writes.load(Ordering::Acquire)
    }

    /// This process's name in `outbox_processes`.
    pub fn process(&self) -> &str {
        &self.process
    }

    /// Returns once this process's announcement is recorded (at once if it is).
    pub async fn registered(&self) {
        let mut rx = self.registered.subscribe();
        let _ = rx.wait_for(|r| *r).await;
    }

    /// Announces this process, unless the decision is past what it reads; and
    /// takes the decision as what to write.
    pub async fn register(&self) -> std::result::Result<(), Refused> {
        let mut tx = self.pg.begin().await.context("announcing the outbox formats read")?;
        let decided = decision(&mut tx).await?;
        if decided > self.reads {
            return Err(Refused::TooOld {
                decided,
                reads: self.reads,
            });
        }
        sqlx::query(
            "INSERT INTO outbox_processes (process, reads, mode, host, pid) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (process) DO UPDATE SET reads = EXCLUDED.reads, seen_at = now()",
        )
        .bind(&self.process)
        .bind(self.reads as i32)
        .bind(self.mode)
        .bind(host())
        .bind(std::process::id() as i32)
        .execute(&mut *tx)
        .await
        .context("announcing the outbox formats read")?;
        tx.commit().await.context("announcing the outbox formats read")?;
        self.take(decided);
        self.registered.send_replace(true);
        tracing::info!(process = %self.process, reads = self.reads, writes = self.writes(), "outbox formats announced");
        Ok(())
    }

    /// Takes this process's announcement away (a graceful stop: nothing of it
    /// reads or writes entries any more).
    pub async fn deregister(&self) {
        let r = sqlx::query("DELETE FROM outbox_processes WHERE process = $1")
            .bind(&self.process)
            .execute(&self.pg)
            .await;
        if let Err(e) = r {
            tracing::warn!(error = %e, "taking the outbox format announcement away failed; `seckill outbox-formats forget {}` does it", self.process);
        }
    }

    /// Until `stop`: announces this process if it is not yet, renews the
    /// announcement, raises the decision when every announced process reads a
    /// newer format than the one decided, and takes the decision. Ends early
    /// (stopping the process) only when the decision moved past what this process
    /// reads, which only an operator's hand allows (it was declared gone while
    /// alive, or the decision was set by hand).
    pub async fn run(&self, stop: CancellationToken) {
        let mut every = tokio::time::interval(EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut checked = std::time::Instant::now();
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = every.tick() => {}
            }
            match self.round().await {
                Ok(()) => checked = std::time::Instant::now(),
                Err(Refused::TooOld { decided, reads }) => {
                    tracing::error!(
                        process = %self.process,
                        decided,
                        reads,
                        "outbox format {decided} is being written, which this process cannot read \
                         (it was declared gone, or the decision was set by hand): it stops"
                    );
                    return;
                }
                Err(Refused::Unreachable(e)) => {
                    // Cut off from the decision (it may have been lowered, this
                    // process declared gone): the oldest format, which every
                    // reader reads, until the next check succeeds.
                    if checked.elapsed() >= 3 * EVERY && self.writes() > 1 {
                        self.take(1);
                        tracing::warn!(
                            "outbox format decision unread for {:?}: writing format 1 meanwhile",
                            checked.elapsed()
                        );
                    }
                    tracing::warn!(error = %format!("{e:#}"), "the outbox format fence not checked; trying again");
                }
            }
        }
    }

    async fn round(&self) -> std::result::Result<(), Refused> {
        if !*self.registered.borrow() {
            return self.register().await;
        }
        let renewed = sqlx::query("UPDATE outbox_processes SET seen_at = now() WHERE process = $1")
            .bind(&self.process)
            .execute(&self.pg)
            .await
            .context("renewing the outbox format announcement")?;
        if renewed.rows_affected() == 0 {
            // Declared gone while alive: the oldest format until announced again
            // (refused if the decision moved past what this process reads), so
            // that nothing it writes meanwhile waits for a newer reader.
            self.take(1);
            self.registered.send_replace(false);
            tracing::warn!(process = %self.process, "this process's outbox format announcement was taken away; announcing again");
            return self.register().await;
        }
        let decided = if self.writes() < self.reads {
            self.try_raise().await?
        } else {
            let decided: i32 = sqlx::query_scalar("SELECT writes FROM outbox_format")
                .fetch_one(&self.pg)
                .await
                .context("reading the outbox format decision")?;
            decided.max(1) as u32
        };
        // Only an operator's hand (a process declared gone while alive, the
        // decision set by hand) gets here: this process cannot read what is written.
        if decided > self.reads {
            return Err(Refused::TooOld {
                decided,
                reads: self.reads,
            });
        }
        self.take(decided);
        Ok(())
    }

    /// Raises the decision to the newest format every announced process reads,
    /// if that is newer than the one decided; the decision.
    async fn try_raise(&self) -> std::result::Result<u32, Refused> {
        let mut tx = self.pg.begin().await.context("raising the outbox format")?;
        let decided = decision(&mut tx).await?;
        let (all_read, mine): (Option<i32>, Option<i32>) =
            sqlx::query_as("SELECT min(reads), min(reads) FILTER (WHERE process = $1) FROM outbox_processes")
                .bind(&self.process)
                .fetch_one(&mut *tx)
                .await
                .context("reading the outbox format announcements")?;
        let target = all_read.unwrap_or(1).max(1) as u32;
        if mine.is_some() && target > decided {
            sqlx::query("UPDATE outbox_format SET writes = $1, decided_at = now(), decided_by = $2")
                .bind(target as i32)
                .bind(&self.process)
                .execute(&mut *tx)
                .await
                .context("raising the outbox format")?;
            tx.commit().await.context("raising the outbox format")?;
            tracing::info!(
                from = decided,
                to = target,
                process = %self.process,
                "outbox format raised: every announced process reads it"
            );
            Ok(target)
        } else {
            tx.commit().await.context("raising the outbox format")?;
            Ok(decided)
        }
    }

    fn take(&self, decided: u32) {
        let writes = decided.clamp(1, self.reads);
        self.writes.store(writes, Ordering::Release);
        self.gauge.set(writes as i64);
    }
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".to_owned())
}
