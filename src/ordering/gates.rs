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
//!
//! Each gate passes this process's points of its shard's history and names each
//! write ([`crate::recovery::history`]), and keeps the orders it acknowledged in
//! the shard's log ([`crate::recovery::history::LOG`] of the latest): should the
//! shard be found to have gone back in time, those orders, acknowledged here and
//! perhaps read by no relay, are handed to the recovery desk, which has the
//! repair count them or admits them again after it
//! ([`crate::recovery::Recovery::rescue`]).
mod gate;
mod script;

use super::replication::{reserve_and_wait, Replication};
use crate::keys::Keys;
use crate::metrics::Metrics;
use crate::recovery::history::{gen_of, Call};
use crate::recovery::Recovery;
use crate::redis_conn::Redis;
use anyhow::Context;
use redis::{RedisError, Script, Value};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use tokio::sync::oneshot;

use gate::{lost_answer, Answer, Gate, Opener, Waiting};
use script::{decode_reply, script_args, short_of_replicas, split_reply};
pub use script::{Ask, Reservation};

static RESERVE: LazyLock<Script> = LazyLock::new(|| Script::new(super::replication::SOURCE));

/// The most orders one call carries.
pub const MAX_BATCH: usize = 64;

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
                let tag = crate::keys::shard_tag(voucher, shard, shards);
                Arc::new(Gate {
                    voucher,
                    keys: [
                        k.stock_at(voucher, shard, shards),
                        k.buyers_at(voucher, shard, shards),
                        k.admitted_at(voucher, shard, shards),
                        k.outbox_at(voucher, shard, shards),
                        k.seq_at(voucher, shard, shards),
                        k.hist_at(voucher, shard, shards),
                    ],
                    history: self.recovery.histories.shard(&tag),
                    tag,
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
        if let Some(refused) = self.replicas_behind(gate, asks) {
            return Ok(refused);
        }
        let _timer = self.metrics.reserve_seconds.start_timer();
        self.metrics.reserve_batch.observe(asks.len() as f64);
        let history = Call::on(gate.history.clone());
        let args = script_args(gate.voucher, &history, self.recovery.formats.writes(), asks);
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
        let script::Reply {
            status,
            seq,
            wrote,
            replies,
        } = split_reply(reply)?;
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
        // a failover could lose them. Nor is the write's point kept: a replica
        // promoted without it lost nothing anyone was told.
        let Some(acked) = acked.filter(|a| *a < r.replicas as i64) else {
            history.passed(seq, wrote);
            if wrote {
                self.log(gate, seq, asks, &decided);
            }
            return Ok(decided);
        };
        history.passed(seq, false);
        let ids: std::collections::HashSet<i64> = asks.iter().map(|a| a.order_id).collect();
        let took = decided.iter().any(|d| matches!(d, Ok(Reservation::Accepted { .. })));
        Ok(decided
            .into_iter()
            .map(|d| d.map(|d| short_of_replicas(d, acked, &ids, took)))
            .collect())
    }
}

impl Reserver {
    /// With orders waiting for replicas, and the shard's master having fewer in
    /// sync (as last read): every ask refused before it reserves, since a unit
    /// taken now could not be acknowledged.
    fn replicas_behind(&self, gate: &Gate, asks: &[Ask]) -> Option<Vec<Answer>> {
        let r = &self.replication;
        if r.replicas == 0 {
            return None;
        }
        let in_sync = r.watch.in_sync(&gate.keys[0]);
        (in_sync < r.replicas as i64).then(|| {
            asks.iter()
                .map(|_| Ok(Reservation::ReplicasBehind { in_sync }))
                .collect()
        })
    }

    /// Keeps the orders a write at `seq` admitted in the shard's log; those of an
    /// older generation than `seq`'s (a repair since) go to the recovery desk,
    /// which finds whether the repair counted them.
    fn log(&self, gate: &Gate, seq: i64, asks: &[Ask], decided: &[Answer]) {
        let voucher = crate::id::VoucherId::new(gate.voucher);
        let accepted = asks
            .iter()
            .zip(decided)
            .filter(|(_, d)| matches!(d, Ok(Reservation::Accepted { .. })))
            .map(|(a, _)| crate::ordering::OrderMsg {
                id: crate::id::OrderId::new(a.order_id),
                user_id: crate::id::UserId::new(a.user_id),
                voucher_id: voucher,
                created_ms: a.created_ms,
                epoch: gen_of(seq),
            });
        self.recovery
            .keep(gate.voucher, &gate.tag, &gate.history, seq, accepted);
    }

    /// One run of the script (and `WAIT`) with `args`: its reply, and how many
    /// replicas acknowledged it (`None` without replicas).
    async fn invoke(&self, redis: &Redis, gate: &Gate, args: &[Vec<u8>]) -> anyhow::Result<(Value, Option<i64>)> {
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

#[cfg(test)]
mod tests;
