//! The per-shard gates that run `lua/reserve.lua` for orders, coalesced per shard.
//!
//! Every order for one shard of a sale goes through that shard's gate in this
//! process. While no call for the shard is in flight, an order's call leaves at
//! once, alone. While one is in flight, the orders that arrive wait at the gate, and
//! when it returns they leave together in the next call (at most [`MAX_BATCH`];
//! the rest in the calls after). No timer decides anything: a batch is whatever
//! gathered during the previous round trip. The script decides each order exactly
//! as it would alone, in the order the orders reached the gate, so each shopper
//! gets the answer one call of their own would have given; an error of the call
//! (Redis unreachable, a failover) is every order's answer, as it would have been.
//!
//! The calls run in a task of their own: an order whose request is dropped (its
//! client went away) does not drop the call that carries other orders, nor leave
//! the gate closed. Each gate keeps its shard's key names, built once.
//!
//! With `SECKILL_REDIS_WAIT_REPLICAS` above 0 each call is followed by `WAIT` in
//! the same pipeline, over the replication links, and an order is acknowledged
//! only once that many replicas hold its call's writes.
mod script;

use super::replication::{reserve_and_wait, Replication};
use crate::keys::Keys;
use crate::metrics::Metrics;
use crate::recovery::Recovery;
use crate::redis_conn::Redis;
use anyhow::Context;
use redis::{RedisError, Script, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use tokio::sync::oneshot;

use script::{decode_reply, script_args, short_of_replicas, split_reply};
pub use script::{Ask, Reservation};

static RESERVE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/reserve.lua")));

/// The most orders one call carries.
pub const MAX_BATCH: usize = 64;

type Answer = anyhow::Result<Reservation>;

/// The orders at a gate, each with where its answer goes.
type Waiting = Vec<(Ask, oneshot::Sender<Answer>)>;

/// The orders waiting for one shard, and whether a call for it is in flight.
struct Gate {
    voucher: i64,
    keys: [String; 5],
    /// This process's floor for the shard (see [`crate::recovery::Floors`]).
    floor: Arc<AtomicI64>,
    state: Mutex<(bool, Waiting)>,
}

/// Every gate of this process, with what a call needs.
pub struct Reserver {
    pub keys: Keys,
    pub replication: Replication,
    pub metrics: Arc<Metrics>,
    pub recovery: Arc<Recovery>,
    gates: Mutex<HashMap<(i64, u32, u32), Arc<Gate>>>,
}

impl Reserver {
    pub fn new(keys: Keys, replication: Replication, metrics: Arc<Metrics>, recovery: Arc<Recovery>) -> Self {
        Self {
            keys,
            replication,
            metrics,
            recovery,
            gates: Mutex::default(),
        }
    }

    fn gate(&self, voucher: i64, shard: u32, shards: u32) -> Arc<Gate> {
        let mut gates = self.gates.lock().expect("gates poisoned");
        gates
            .entry((voucher, shard, shards))
            .or_insert_with(|| {
                let k = &self.keys;
                Arc::new(Gate {
                    voucher,
                    keys: [
                        k.stock_at(voucher, shard, shards),
                        k.buyers_at(voucher, shard, shards),
                        k.admitted_at(voucher, shard, shards),
                        k.outbox_at(voucher, shard, shards),
                        k.seq_at(voucher, shard, shards),
                    ],
                    floor: self
                        .recovery
                        .floors
                        .cell(&crate::keys::shard_tag(voucher, shard, shards)),
                    state: Mutex::default(),
                })
            })
            .clone()
    }

    /// Reserves `ask` on one shard of `voucher`'s sale through `redis` (this
    /// thread's handle; unused with replicas, whose links are taken in turn).
    pub async fn reserve(
        self: &Arc<Self>,
        redis: &Arc<Redis>,
        voucher: i64,
        shard: u32,
        shards: u32,
        ask: Ask,
    ) -> Answer {
        let gate = self.gate(voucher, shard, shards);
        let (tx, rx) = oneshot::channel();
        let lead = {
            let mut state = gate.state.lock().expect("gate poisoned");
            state.1.push((ask, tx));
            !std::mem::replace(&mut state.0, true)
        };
        if lead {
            let (me, redis) = (self.clone(), redis.clone());
            tokio::spawn(async move { me.drain(&redis, &gate).await });
        }
        rx.await.unwrap_or_else(|_| Err(lost_answer()))
    }

    /// Calls until no order waits at `gate`, then opens it.
    async fn drain(&self, redis: &Redis, gate: &Gate) {
        let mut opener = Opener { gate, armed: true };
        loop {
            let batch: Waiting = {
                let mut state = gate.state.lock().expect("gate poisoned");
                // A request gone (its client left) before its call: nothing to reserve.
                state.1.retain(|(_, tx)| !tx.is_closed());
                if state.1.is_empty() {
                    state.0 = false;
                    opener.armed = false;
                    return;
                }
                let n = state.1.len().min(MAX_BATCH);
                state.1.drain(..n).collect()
            };
            let asks: Vec<Ask> = batch.iter().map(|(a, _)| *a).collect();
            match self.call(redis, gate, &asks).await {
                Ok(answers) => {
                    for ((_, tx), answer) in batch.into_iter().zip(answers) {
                        let _ = tx.send(answer);
                    }
                }
                Err(e) => {
                    // Every order waiting now shares the failure: a Redis that does not
                    // answer would otherwise fail the waiting batches one deadline at a
                    // time, the last one minutes later.
                    let more = std::mem::take(&mut gate.state.lock().expect("gate poisoned").1);
                    let shared = format!("{e:#}");
                    for (_, tx) in batch.into_iter().chain(more) {
                        let _ = tx.send(Err(match e.chain().find_map(|c| c.downcast_ref::<RedisError>()) {
                            Some(redis) => anyhow::Error::new(redis.clone()).context(shared.clone()),
                            None => anyhow::anyhow!("{shared}"),
                        }));
                    }
                }
            }
        }
    }

    /// One call of the script (and `WAIT`) for `asks`: one answer each.
    async fn call(&self, redis: &Redis, gate: &Gate, asks: &[Ask]) -> anyhow::Result<Vec<Answer>> {
        let r = &self.replication;
        let redis = match r.replicas {
            0 => redis,
            _ => &r.links[r.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % r.links.len()],
        };
        let _timer = self.metrics.reserve_seconds.start_timer();
        self.metrics.reserve_batch.observe(asks.len() as f64);
        let args = script_args(
            gate.voucher,
            gate.floor.load(Ordering::Acquire),
            self.recovery.formats.writes(),
            asks,
        );
        // Once more on a new connection when this one turned out to be dead (Redis
        // restarted, failed over): the server may well be up again. Safe: a call
        // that did run the first time finds each of its shoppers marked with the
        // order's own id, which answers as admitted (below).
        let (reply, acked) = match self.invoke(redis, gate, &args).await {
            Err(e)
                if e.chain().any(|c| {
                    c.downcast_ref::<RedisError>()
                        .is_some_and(crate::redis_conn::connection_lost)
                }) =>
            {
                self.invoke(redis, gate, &args).await?
            }
            other => other?,
        };
        let (status, seq, replies) = split_reply(reply)?;
        match status {
            1 => {}
            0 => return Ok(asks.iter().map(|_| Ok(Reservation::Behind)).collect()),
            _ => return Ok(asks.iter().map(|_| Ok(Reservation::NotLoaded)).collect()),
        }
        if replies.len() != asks.len() {
            anyhow::bail!(
                "reserve.lua returned {} replies for {} orders",
                replies.len(),
                asks.len()
            );
        }
        let decided: Vec<Answer> = replies
            .into_iter()
            .zip(asks)
            .map(|(reply, ask)| {
                decode_reply(reply).map(|d| match d {
                    // Its own order: admitted by an earlier run of this call (a retry).
                    Reservation::AlreadyOrdered { order_id: Some(id) } if id == ask.order_id => {
                        Reservation::Accepted { stock_left: 0 }
                    }
                    other => other,
                })
            })
            .collect();
        // Fewer replicas than required hold this call's writes: no order it admitted
        // is acknowledged, nor an answer that stems from one (an "already ordered"
        // naming an order of this call, a "sold out" after this call took units):
        // a failover could lose them. Nor is the floor raised to them: a replica
        // promoted without them lost nothing anyone was told.
        let Some(acked) = acked.filter(|a| *a < r.replicas as i64) else {
            gate.floor.fetch_max(seq, Ordering::AcqRel);
            return Ok(decided);
        };
        let ids: std::collections::HashSet<i64> = asks.iter().map(|a| a.order_id).collect();
        let took = decided.iter().any(|d| matches!(d, Ok(Reservation::Accepted { .. })));
        Ok(decided
            .into_iter()
            .map(|d| d.map(|d| short_of_replicas(d, acked, &ids, took)))
            .collect())
    }
}

impl Reserver {
    /// One run of the script (and `WAIT`) with `args`: its reply, and how many
    /// replicas acknowledged it (`None` without replicas).
    async fn invoke(&self, redis: &Redis, gate: &Gate, args: &[String]) -> anyhow::Result<(Value, Option<i64>)> {
        let r = &self.replication;
        let mut conn = redis.conn().await?;
        if r.replicas == 0 {
            let mut invocation = RESERVE.prepare_invoke();
            invocation.key(&gate.keys).arg(args);
            let reply: Value = invocation.invoke_async(&mut conn).await.context("reserve.lua")?;
            Ok((reply, None))
        } else {
            let (reply, acked) = reserve_and_wait(&mut conn, &gate.keys, args, r)
                .await
                .context("reserve.lua + WAIT")?;
            Ok((reply, Some(acked)))
        }
    }
}

/// The answer of an order whose call ended without one (its task was stopped, e.g.
/// at shutdown): the order may exist; a transient error, so 503 and a safe retry.
fn lost_answer() -> anyhow::Error {
    anyhow::Error::new(RedisError::from((
        redis::ErrorKind::Io,
        "the reservation's call ended without an answer; the order may exist",
    )))
}

/// Opens the gate and answers every order waiting at it (with [`lost_answer`])
/// when a drain stops before its end (its task stopped, a panic), unless disarmed:
/// no order waits forever for a call nobody will make.
struct Opener<'a> {
    gate: &'a Gate,
    armed: bool,
}

impl Drop for Opener<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let waiting = {
            let mut state = self.gate.state.lock().unwrap_or_else(|p| p.into_inner());
            state.0 = false;
            std::mem::take(&mut state.1)
        };
        for (_, tx) in waiting {
            let _ = tx.send(Err(lost_answer()));
        }
    }
}

#[cfg(test)]
mod tests;
