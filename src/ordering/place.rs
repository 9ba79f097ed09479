//! Placing an order: the hot path.
//!
//! No Postgres: the voucher and its sale window come from the in-process cache. One
//! Redis round trip carries the order: `lua/reserve.lua` (EVALSHA) admits or refuses
//! it and, when it admits it, has already put it in the voucher's outbox. The call
//! carries every order of this process waiting for the same shard (`gates.rs`:
//! while one call is in flight the next orders gather, so an order waits at most
//! for the call ahead of it). The order id comes from the ID worker's in-memory
//! block.
//!
//! A sharded sale (`stock_shards` > 1) runs the script on the shopper's shard
//! ([`crate::keys::shard_of`]). Only when that shard is dry does the order take more
//! round trips: [`crate::sales::refill::refill`] moves units to it from the
//! richest shard (one refill per sale at a time in a process, and one across
//! processes; the requests waiting take its answer), and the sale is sold out only
//! when a consistent reading of every shard finds no stock and nothing in transit.
//! A reading that cannot be made consistent answers 503, never "sold out".
//!
//! With `SECKILL_REDIS_WAIT_REPLICAS` above 0 the script and a `WAIT` travel in one
//! pipeline (still one round trip), and the order is acknowledged only once that
//! many replicas hold its reservation: a failover to a replica then cannot lose
//! it. `WAIT` holds its connection until the replicas answer, so these pipelines
//! go over a pool of connections of their own rather than the shared one. Past the
//! deadline the shopper gets 503: the order may exist (its reservation is on the
//! master), which `…/orders/mine` tells, and a retry answers `already_ordered`.
mod handles;
mod take;

pub use super::gates::Reservation;
use super::gates::{Ask, Reserver};
pub use super::refill_flights::RefillFlights;
use super::refusal::unavailable;
pub use super::refusal::{NotAdmitted, NotTaken, Refusal};
use super::replication::Replication;
use crate::clock::Clock;
use crate::clock_skew::ClockSkew;
use crate::id::{OrderId, UserId, VoucherId};
use crate::keys::Keys;
use crate::metrics::Metrics;
use crate::numbers::id_worker::IdWorker;
use crate::redis_conn::Redis;
use crate::sales::cache::{Entry, Observed, VoucherCache};
use crate::sales::refill::{refill, Refill};
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// An order's sale as [`OrderPlacer::judge_early`] found it: its cache entry, and
/// the instant its window was judged at (the order's admission time).
pub struct Judged {
    entry: Arc<Entry>,
    now: DateTime<Utc>,
}

impl Judged {
    /// The sale's admission: whether an order needs an admission token.
    pub fn admission(&self) -> crate::admission::Mode {
        self.entry
            .voucher
            .flash
            .as_ref()
            .map(|f| f.admission)
            .unwrap_or_default()
    }

    /// The sale's queue's pauses that ended, in total (ms; 0 without a queue).
    pub fn queue_paused_ms(&self) -> i64 {
        self.entry.voucher.flash.as_ref().map_or(0, |f| f.queue_paused_ms)
    }
}

/// What placing an order needs.
#[derive(Clone)]
pub struct OrderPlacer {
    pub cache: Arc<VoucherCache>,
    pub ids: Arc<IdWorker>,
    pub redis: Redis,
    pub replication: Replication,
    pub keys: Keys,
    pub clock: Clock,
    pub clock_skew: Arc<ClockSkew>,
    pub metrics: Arc<Metrics>,
    /// One mover per dry (voucher, shard) in this process.
    pub refill_flights: Arc<RefillFlights>,
    /// Admission tokens of queue and raffle sales are checked with its signer.
    pub admission: Arc<crate::admission::Admission>,
    /// The gates that coalesce each shard's reservations (see `gates.rs`).
    pub reserver: Arc<Reserver>,
}

/// How many moves one order request may ask for before it answers 503.
const MAX_REFILLS: usize = 3;
/// How many times one order request may run the script.
const MAX_TRIES: usize = 8;

impl OrderPlacer {
    /// The refusals this process decides alone, from the cache and its clock: no
    /// such voucher, not a flash sale, paused, a clock too far off, outside the
    /// window. The voucher's entry otherwise, and the instant the window was
    /// judged at.
    fn judge(&self, voucher_id: i64) -> Result<(Arc<Entry>, DateTime<Utc>), Refusal> {
        let entry = self.cache.get(voucher_id).ok_or(Refusal::VoucherNotFound)?;
        let flash = entry.voucher.flash.as_ref().ok_or(Refusal::NotAFlashSale)?;
        if entry.voucher.paused {
            // From the cache, which every instance keeps within a second of Postgres.
            return Err(Refusal::Paused);
        }
        if self.clock_skew.refusing() {
            // Too far from Postgres's clock to judge the sale window: other instances sell.
            return Err(unavailable(
                "this server's clock is off; try again",
                crate::clock_skew::RETRY_AFTER_SECS,
            ));
        }
        let now = self.clock.now();
        if now < flash.begin_at {
            return Err(Refusal::NotStarted(flash.begin_at));
        }
        if now >= flash.end_at {
            return Err(Refusal::Ended(flash.end_at));
        }
        Ok((entry, now))
    }

    /// Judges an order before anything else is spent on it (the per-shopper rate
    /// limit, an order id, Redis): the refusals this process answers alone, the
    /// sold-out flag's included (a look that takes no probe: the one request that
    /// is to probe it with Redis goes on). The crowd after a sell-out, or outside
    /// the window, costs a cache lookup. What it judged is handed to
    /// [`OrderPlacer::place`], which does not look again.
    pub fn judge_early(&self, voucher_id: VoucherId) -> Result<Judged, Refusal> {
        let (entry, now) = self.judge(voucher_id.get())?;
        if entry.known_sold_out() {
            return Err(Refusal::SoldOut);
        }
        Ok(Judged { entry, now })
    }

    /// Places the order judged by [`OrderPlacer::judge_early`] for `user_id`;
    /// returns the new order's id.
    pub async fn place(&self, judged: Judged, user: UserId) -> Result<OrderId, Refusal> {
        let Judged { entry, now } = judged;
        let user_id = user.get();
        let voucher_id = entry.voucher.id;
        let flash = entry.voucher.flash.as_ref().ok_or(Refusal::NotAFlashSale)?;
        let (known_sold_out, seen) = entry.read_sold_out_flag();
        if known_sold_out {
            return Err(Refusal::SoldOut);
        }
        if self.recovery().is_closed(voucher_id) {
            // A shard of it lost state or went back in time: no id, no order until
            // it is repaired (other sales sell on).
            return Err(unavailable(
                "this sale is temporarily unavailable while its state is repaired",
                1,
            ));
        }
        let order_id = self.ids.next_id().await.map_err(|e| {
            tracing::warn!(error = %format!("{e:#}"), "no order id");
            unavailable("no order id can be issued right now", 1)
        })?;
        let shards = flash.shards();
        let shard = crate::keys::shard_of(user_id, shards);
        let ask = Ask {
            user_id,
            order_id,
            created_ms: now.timestamp_millis(),
        };
        let mut refills = 0;
        let mut tries = 0;
        let outcome = loop {
            tries += 1;
            let r = self.reserve_at(voucher_id, shard, shards, ask).await?;
            if r != Reservation::SoldOut || shards == 1 {
                break r;
            }
            if refills == MAX_REFILLS || tries == MAX_TRIES {
                return Err(unavailable(
                    "this sale's stock is being moved between its shards; try again",
                    1,
                ));
            }
            match self.refill_dry(voucher_id, shards, shard, &mut refills).await? {
                Refill::Retry => continue,
                Refill::SoldOut => break Reservation::SoldOut,
                Refill::NotLoaded => break Reservation::NotLoaded,
                Refill::Behind => break Reservation::Behind,
                Refill::Closed => break Reservation::Closed,
                Refill::Unknown => {
                    return Err(unavailable(
                        "this sale's stock is being moved between its shards; try again",
                        1,
                    ))
                }
            }
        };
        self.answer(&entry, seen, order_id, outcome).map(OrderId::new)
    }

    /// Brings units to dry shard `shard` of the sale: runs a refill, counted in
    /// `refills`, or takes the answer of one that started after this request found
    /// the shard dry (see [`RefillFlights`]).
    async fn refill_dry(
        &self,
        voucher_id: i64,
        shards: u32,
        shard: u32,
        refills: &mut usize,
    ) -> Result<Refill, Refusal> {
        let mover = self.refill_flights.get(voucher_id);
        let dry_at = mover.started.load(std::sync::atomic::Ordering::Acquire);
        let mut last = mover.last.lock().await;
        match *last {
            // A refill that started after this request's shard was found dry.
            (n, Some(answer)) if n > dry_at => Ok(answer),
            _ => {
                *refills += 1;
                let n = mover.started.fetch_add(1, std::sync::atomic::Ordering::AcqRel) + 1;
                let answer = refill(&self.redis, &self.keys, self.recovery(), voucher_id, shards, shard).await?;
                *last = (n, Some(answer));
                Ok(answer)
            }
        }
    }

    /// The shopper's answer to what the script (or a refill) decided for order
    /// `order_id`; the sale's sold-out flag is set or cleared against `seen`, and a
    /// shard found lost or behind is reported.
    fn answer(&self, entry: &Entry, seen: Observed, order_id: i64, outcome: Reservation) -> Result<i64, Refusal> {
        let voucher_id = entry.voucher.id;
        match outcome {
            Reservation::Accepted { .. } => {
                entry.in_stock(seen);
                Ok(order_id)
            }
            Reservation::SoldOut => {
                entry.mark_sold_out(seen);
                Err(Refusal::SoldOut)
            }
            Reservation::AlreadyOrdered { order_id } => Err(Refusal::AlreadyOrdered(order_id.map(OrderId::new))),
            Reservation::NotReplicated { acked } => {
                tracing::warn!(
                    voucher_id,
                    order_id,
                    acked,
                    wanted = self.replication.replicas,
                    "an order's reservation did not reach enough replicas in time"
                );
                self.metrics.order("not_replicated");
                Err(unavailable(
                    "the order is not yet safe on enough Redis replicas: it may exist (see /orders/mine); a retry is safe",
                    1,
                ))
            }
            Reservation::ReplicasBehind { in_sync } => {
                self.metrics.order("replicas_behind");
                tracing::debug!(voucher_id, in_sync, "refused before reserving: replicas behind");
                Err(unavailable(
                    "Redis has fewer in-sync replicas than orders wait for: nothing was reserved; retry shortly",
                    1,
                ))
            }
            Reservation::NotLoaded => {
                self.recovery().lost(voucher_id, "a shard's stock is missing in Redis");
                Err(unavailable(
                    "this sale is temporarily unavailable while its state is repaired",
                    1,
                ))
            }
            Reservation::Behind => {
                self.recovery().lost(
                    voucher_id,
                    "a shard went back in time (its sequence is behind what this process saw)",
                );
                Err(unavailable(
                    "this sale is temporarily unavailable while its state is repaired",
                    1,
                ))
            }
            Reservation::Closed => Err(unavailable(
                "this sale is temporarily unavailable while its state is repaired",
                1,
            )),
        }
    }

    /// The recovery desk: which sales this process has closed, the points of each shard it saw.
    fn recovery(&self) -> &crate::recovery::Recovery {
        &self.reserver.recovery
    }

    /// Runs the script for one order on one shard of the sale (with the other
    /// orders at that shard's gate, see `gates.rs`).
    pub async fn reserve_at(&self, voucher_id: i64, shard: u32, shards: u32, ask: Ask) -> anyhow::Result<Reservation> {
        let redis = self.on_this_thread();
        self.reserver.reserve(&redis, voucher_id, shard, shards, ask).await
    }
}
