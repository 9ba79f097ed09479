//! Completing the moves between shards that a process left in transit: every
//! move is written in its sale's registry of moves under way
//! ([`Keys::moves_of`]) before its first step and removed after its last. Every
//! second each instance reads the registries of the running sharded sales
//! ([`run_recovery`]): an idle sale costs it one read, a sale that is not sharded
//! none. An entry it finds is replayed with its own transfer id: the give, the
//! take and the close are idempotent (a give of an id already spent gives
//! nothing), so replaying the move of a live mover is harmless, and the move of a
//! dead one is completed. One sale's registry is on that sale's shard 0, so no
//! sale's refills need a key of another's (the shared cluster client still
//! couples the masters: a frozen one's timeouts reach others while it reconnects).
use super::refill::{step, Refill};
use super::shards::Move;
use crate::keys::Keys;
use crate::recovery::Recovery;
use crate::redis_conn::{Conn, Redis};
use anyhow::{Context, Result};
use std::collections::HashMap;
use std::time::Duration;

/// Completes (or replays) every move in the registries of the running sharded
/// sales (and the namespace's, of versions before them). Returns how many entries
/// it cleared. A move whose shard is lost or went back in time asks for its sale's
/// repair. One sale's registry that cannot be read (its master does not answer)
/// stops no other sale's.
pub async fn recover(redis: &Redis, keys: &Keys, recovery: &Recovery) -> Result<usize> {
    let mut conn = redis.conn().await?;
    let sales: Vec<i64> = recovery
        .cache
        .flash_sales()
        .iter()
        .filter(|e| e.voucher.flash.as_ref().is_some_and(|f| f.shards() > 1))
        .map(|e| e.voucher.id)
        .collect();
    let mut cleared = 0;
    let mut failed = None;
    for registry in sales.iter().map(|v| keys.moves_of(*v)).chain([keys.moves()]) {
        let moves: HashMap<String, String> = match redis::cmd("HGETALL").arg(&registry).query_async(&mut conn).await {
            Ok(m) => m,
            Err(e) => {
                failed.get_or_insert(e);
                continue;
            }
        };
        match replay(&mut conn, keys, recovery, &registry, moves).await {
            Ok(n) => cleared += n,
            Err(e) => {
                tracing::warn!(registry, error = %format!("{e:#}"), "replaying a sale's moves failed; the others go on");
            }
        }
    }
    if cleared > 0 {
        tracing::info!(moves = cleared, "completed moves under way");
    }
    match failed {
        Some(e) if cleared == 0 => Err(e).context("reading the moves under way"),
        _ => Ok(cleared),
    }
}

/// Replays the moves of one registry; returns how many it cleared.
async fn replay(
    conn: &mut Conn,
    keys: &Keys,
    recovery: &Recovery,
    registry: &str,
    moves: HashMap<String, String>,
) -> Result<usize> {
    let mut cleared = 0;
    for (transfer, spec) in moves {
        let parsed: Option<Vec<i64>> = spec.split(':').map(|p| p.parse().ok()).collect();
        let over = match parsed.as_deref() {
            Some(&[voucher, _, _, _, _]) if recovery.is_closed(voucher) => true,
            Some(&[voucher, shards, from, to, want]) => {
                let (shards, from, to) = (shards as u32, from as u32, to as u32);
                let mv = Move {
                    voucher,
                    shards,
                    from,
                    to,
                    transfer: &transfer,
                };
                let (r, over) = step(conn, keys, recovery, &mv, want).await?;
                if matches!(r, Refill::NotLoaded | Refill::Behind) {
                    recovery.lost(voucher, "a shard's stock is missing or behind (a move between shards)");
                }
                if over && r != Refill::Retry {
                    // The shard is fenced or lost: the repair rebuilds the sale from
                    // Postgres and clears its ledgers; nothing is left to complete.
                    tracing::warn!(voucher, transfer, outcome = ?r, "a move cannot be completed; left to the repair");
                }
                over
            }
            _ => {
                tracing::warn!(transfer, spec, "dropping a malformed entry of the moves under way");
                true
            }
        };
        if over {
            let _: i64 = redis::cmd("HDEL")
                .arg(registry)
                .arg(&transfer)
                .query_async(conn)
                .await
                .context("forgetting a move")?;
            cleared += 1;
        }
    }
    Ok(cleared)
}

/// Until `stop`: every `every` (by default a second), [`recover`]: one read of the
/// registry per instance, whatever the number of sales and shards (every API
/// instance runs it; the steps are idempotent).
pub async fn run_recovery(
    redis: Redis,
    keys: Keys,
    recovery: std::sync::Arc<Recovery>,
    every: Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut every = tokio::time::interval(every);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failures = 0u32;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = every.tick() => {}
        }
        match recover(&redis, &keys, &recovery).await {
            Ok(_) => failures = 0,
            Err(err) => {
                failures += 1;
                if failures <= 3 || failures.is_multiple_of(60) {
                    tracing::warn!(error = %format!("{err:#}"), "completing moves failed");
                }
            }
        }
    }
}
