//! Order ids: a positive 63-bit number, seconds since [`EPOCH_SECS`] in the high
//! bits and a per-day counter in the low 32 bits (the usual Redis ID worker).
//!
//! The counter is reserved in Postgres ([`crate::numbers::ranges`]) in blocks, one
//! scope per UTC day: each process takes a block of `block` values at a time, in
//! one statement, and hands its ids out from memory. Ids are unique because
//! (second, counter) pairs are: a block is only used on the day it was taken, no
//! two reservations of a day overlap (a row lock and a durable mark in Postgres,
//! whatever Redis or the processes go through), and the second pins the day. So
//! ids depend on no Redis master: a shop of many masters keeps taking orders on
//! the masters that answer while one is down.
//!
//! Blocks are fetched in the background, and on the order path only when none is
//! left: a block is fetched when the process starts ([`IdWorker::warm_up`]), a
//! spare is fetched while the current one is in use, and in the last minutes of a
//! UTC day the first block of the next day is fetched ahead, so the order path
//! keeps working through midnight, and through a Postgres outage for as long as
//! the blocks in hand last (two blocks: `SECKILL_ID_BLOCK` × 2 orders).
use crate::clock::Clock;
use crate::numbers::witness;
use anyhow::{bail, Result};
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use std::sync::{Arc, Mutex};

/// 2024-01-01T00:00:00Z.
pub const EPOCH_SECS: i64 = 1_704_067_200;
const COUNTER_BITS: u32 = 32;
const DAY_SECS: i64 = 86_400;
/// How long before UTC midnight the next day's first block is fetched.
const NEXT_DAY_AHEAD_SECS: i64 = 600;

#[derive(Clone, Copy, Debug)]
struct Block {
    day: i64,
    next: u64,
    last: u64,
}

/// Blocks in hand: at most a current and a spare for today and one for tomorrow.
#[derive(Default)]
struct Blocks {
    list: Vec<Block>,
    refilling: bool,
    /// After a failed fetch, the next background attempt waits until then.
    retry_at: Option<std::time::Instant>,
}

impl Blocks {
    /// The next counter value for `day`; blocks of past days are dropped.
    fn take(&mut self, day: i64) -> Option<u64> {
        self.list.retain(|b| b.day >= day && b.next <= b.last);
        let block = self.list.iter_mut().find(|b| b.day == day)?;
        let v = block.next;
        block.next += 1;
        Some(v)
    }

    /// The day a block should be fetched for next, if any.
    fn wanted(&self, day: i64, secs_into_day: i64) -> Option<i64> {
        let live = |d: i64| self.list.iter().filter(|b| b.day == d && b.next <= b.last).count();
        if live(day) < 2 {
            Some(day)
        } else if secs_into_day >= DAY_SECS - NEXT_DAY_AHEAD_SECS && live(day + 1) == 0 {
            Some(day + 1)
        } else {
            None
        }
    }

    fn install(&mut self, block: Block) {
        self.list.push(block);
    }
}

pub struct IdWorker {
    pg: PgPool,
    clock: Clock,
    block: u64,
    blocks: Mutex<Blocks>,
    /// Background fetches run here, never on an HTTP worker's runtime.
    main_runtime: tokio::runtime::Handle,
    /// The background fetches: owned, so that shutdown waits for them.
    tasks: tokio_util::task::TaskTracker,
    /// Checks every block against Postgres going back in time (none: unchecked).
    witness: Option<Arc<crate::numbers::witness::Witness>>,
}

impl IdWorker {
    pub fn new(pg: PgPool, clock: Clock, block: u32) -> Arc<Self> {
        Self::witnessed(pg, clock, block, None)
    }

    /// The same, each block checked by `witness` ([`crate::numbers::witness`]).
    pub fn witnessed(
        pg: PgPool,
        clock: Clock,
        block: u32,
        witness: Option<Arc<crate::numbers::witness::Witness>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            pg,
            clock,
            block: block.max(1) as u64,
            blocks: Mutex::new(Blocks::default()),
            main_runtime: tokio::runtime::Handle::current(),
            tasks: tokio_util::task::TaskTracker::new(),
            witness,
        })
    }

    /// The background block fetches in progress.
    pub fn tasks(&self) -> &tokio_util::task::TaskTracker {
        &self.tasks
    }

    /// Fetches today's first block so that the first orders need no round trip.
    pub async fn warm_up(&self) -> Result<()> {
        let day = self.clock.now().timestamp().div_euclid(DAY_SECS);
        let block = self.fetch(day).await?;
        self.blocks.lock().expect("id blocks poisoned").install(block);
        Ok(())
    }

    /// The next order id. Awaits Postgres only when no block is left.
    pub async fn next_id(self: &Arc<Self>) -> Result<i64> {
        for _ in 0..4 {
            let now = self.clock.now();
            let day = now.timestamp().div_euclid(DAY_SECS);
            let taken = {
                let mut blocks = self.blocks.lock().expect("id blocks poisoned");
                let v = blocks.take(day);
                let backing_off = blocks.retry_at.is_some_and(|t| std::time::Instant::now() < t);
                if !blocks.refilling && !backing_off {
                    if let Some(want) = blocks.wanted(day, now.timestamp().rem_euclid(DAY_SECS)) {
                        blocks.refilling = true;
                        let me = Arc::clone(self);
                        self.tasks
                            .spawn_on(async move { me.refill(want).await }, &self.main_runtime);
                    }
                }
                v
            };
            if let Some(counter) = taken {
                return compose(now, counter);
            }
            // None left: fetch one here, and this request takes its first id (others
            // waiting for ids cannot take them all before it, however many there are).
            let mut block = self.fetch(day).await?;
            if block.next <= block.last && block.day == now.timestamp().div_euclid(DAY_SECS) {
                let counter = block.next;
                block.next += 1;
                self.blocks.lock().expect("id blocks poisoned").install(block);
                return compose(now, counter);
            }
            self.blocks.lock().expect("id blocks poisoned").install(block);
        }
        bail!("could not obtain an order id block")
    }

    async fn refill(self: Arc<Self>, day: i64) {
        let fetched = self.fetch(day).await;
        let mut blocks = self.blocks.lock().expect("id blocks poisoned");
        blocks.refilling = false;
        match fetched {
            Ok(block) => {
                blocks.retry_at = None;
                blocks.install(block);
            }
            Err(e) => {
                blocks.retry_at = Some(std::time::Instant::now() + std::time::Duration::from_secs(1));
                tracing::warn!(error = %format!("{e:#}"), "prefetching an id block failed; retrying in 1s");
            }
        }
    }

    async fn fetch(&self, day: i64) -> Result<Block> {
        let r = witness::reserve_witnessed(
            &self.pg,
            self.witness.as_deref(),
            &format!("order_id:{day}"),
            self.block,
        )
        .await?;
        if r.last >= 1 << COUNTER_BITS {
            bail!("more than 2^32 order ids reserved for day {day}");
        }
        Ok(Block {
            day,
            next: r.first,
            last: r.last,
        })
    }
}

/// Puts the second and the counter together; errors if either overflows its bits.
pub fn compose(now: DateTime<Utc>, counter: u64) -> Result<i64> {
    let secs = now.timestamp() - EPOCH_SECS;
    if !(0..(1 << 31)).contains(&secs) {
        bail!("clock {now} is outside the id epoch");
    }
    if counter >= 1 << COUNTER_BITS {
        bail!("more than 2^32 order ids in one day");
    }
    Ok((secs << COUNTER_BITS) | counter as i64)
}

/// The second an id was made in.
pub fn created_at(id: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp((id >> COUNTER_BITS) + EPOCH_SECS, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_positive_and_carry_their_second() {
        let now = DateTime::parse_from_rfc3339("2026-11-21T12:00:00Z").unwrap().to_utc();
        let id = compose(now, u32::MAX as u64).unwrap();
        assert!(id > 0);
        assert_eq!(created_at(id), Some(now));
        assert!(compose(now, 1 << 32).is_err());
    }

    #[test]
    fn blocks_of_another_day_are_dropped() {
        let mut b = Blocks::default();
        b.install(Block {
            day: 1,
            next: 1,
            last: 2,
        });
        b.install(Block {
            day: 1,
            next: 3,
            last: 4,
        });
        assert_eq!(b.take(1), Some(1));
        assert_eq!(b.take(1), Some(2));
        assert_eq!(b.take(1), Some(3));
        assert_eq!(b.take(2), None);
    }
}
