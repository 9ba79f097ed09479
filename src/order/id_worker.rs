//! Order ids: a positive 63-bit number, seconds since [`EPOCH_SECS`] in the high
//! bits and a per-day counter in the low 32 bits (the seeds' `RedisIdWorker`).
//!
//! The counter comes from a [`DurableCounter`] whose scope is the UTC day, taken in
//! blocks so that the hot path rarely calls Redis: one call per `block` ids, made in
//! the background before the current block runs out. Ids are unique because
//! (second, counter) pairs are: a block is only used on the day it was taken, the
//! counter never repeats within a day (even after Redis loses it), and the second
//! pins the day.
use crate::clock::Clock;
use crate::sequence::counter::DurableCounter;
use anyhow::{bail, Result};
use chrono::{DateTime, Utc};
use std::sync::{Arc, Mutex};

/// 2024-01-01T00:00:00Z.
pub const EPOCH_SECS: i64 = 1_704_067_200;
const COUNTER_BITS: u32 = 32;
/// The durable mark moves this far ahead of the counter per Postgres write.
const DURABLE_STEP: u64 = 1_000_000;
const DAY_SECS: i64 = 86_400;

#[derive(Clone, Copy, Debug)]
struct Block {
    day: i64,
    next: u64,
    last: u64,
}

#[derive(Default)]
struct Blocks {
    current: Option<Block>,
    spare: Option<Block>,
    refilling: bool,
}

impl Blocks {
    /// The next counter value for `day`, dropping blocks of other days.
    fn take(&mut self, day: i64) -> Option<u64> {
        for slot in [&mut self.current, &mut self.spare] {
            if slot.is_some_and(|b| b.day != day || b.next > b.last) {
                *slot = None;
            }
        }
        if self.current.is_none() {
            self.current = self.spare.take();
        }
        let block = self.current.as_mut()?;
        let v = block.next;
        block.next += 1;
        Some(v)
    }

    fn install(&mut self, block: Block) {
        if self
            .current
            .is_none_or(|b| b.next > b.last || b.day != block.day)
        {
            self.current = Some(block);
        } else {
            self.spare = Some(block);
        }
    }
}

pub struct IdWorker {
    counter: DurableCounter,
    clock: Clock,
    block: u64,
    blocks: Mutex<Blocks>,
}

impl IdWorker {
    pub fn new(counter: DurableCounter, clock: Clock, block: u32) -> Arc<Self> {
        Arc::new(Self {
            counter,
            clock,
            block: block.max(1) as u64,
            blocks: Mutex::new(Blocks::default()),
        })
    }

    /// The next order id. Awaits Redis only when no block is left.
    pub async fn next_id(self: &Arc<Self>) -> Result<i64> {
        for _ in 0..4 {
            let now = self.clock.now();
            let day = now.timestamp().div_euclid(DAY_SECS);
            let taken = {
                let mut blocks = self.blocks.lock().expect("id blocks poisoned");
                let v = blocks.take(day);
                if v.is_some() && blocks.spare.is_none() && !blocks.refilling {
                    blocks.refilling = true;
                    let me = Arc::clone(self);
                    tokio::spawn(async move { me.refill(day).await });
                }
                v
            };
            if let Some(counter) = taken {
                return compose(now, counter);
            }
            let block = self.fetch(day).await?;
            self.blocks
                .lock()
                .expect("id blocks poisoned")
                .install(block);
        }
        bail!("could not obtain an order id block")
    }

    async fn refill(self: Arc<Self>, day: i64) {
        let fetched = self.fetch(day).await;
        let mut blocks = self.blocks.lock().expect("id blocks poisoned");
        blocks.refilling = false;
        match fetched {
            Ok(block) => blocks.install(block),
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "prefetching an id block failed"),
        }
    }

    async fn fetch(&self, day: i64) -> Result<Block> {
        let scope = format!("order_id:{day}");
        // Keep the key one extra day past its own, then let it expire.
        let now = self.clock.now().timestamp();
        let ttl = ((day + 2) * DAY_SECS - now).max(60) as u64;
        let r = self
            .counter
            .take(&scope, self.block, ttl, DURABLE_STEP)
            .await?;
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
        let now = DateTime::parse_from_rfc3339("2026-11-21T12:00:00Z")
            .unwrap()
            .to_utc();
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
