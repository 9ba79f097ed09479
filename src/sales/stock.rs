//! The Redis side of a flash sale: loading stock, reading stats, and telling every
//! instance that a voucher or its stock changed (top-ups: [`super::topup`]).
use crate::keys::{Keys, RELAY_GROUP};
use crate::redis_conn::Redis;
use anyhow::{Context, Result};
use redis::Script;
use std::sync::LazyLock;

static LOAD: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/voucher_load.lua")));

/// Loads stock (into each shard whose stock key does not exist: shard k gets its
/// part of [`crate::keys::split`]) and makes every shard's outbox consumer group exist.
/// True if every shard was loaded now.
pub async fn load(redis: &Redis, keys: &Keys, voucher_id: i64, stock: i32, shards: u32) -> Result<bool> {
    let mut conn = redis.conn().await?;
    let mut all = true;
    for (k, part) in crate::keys::split(stock as i64, shards).into_iter().enumerate() {
        let k = k as u32;
        let loaded: i64 = LOAD
            .key(keys.stock_at(voucher_id, k, shards))
            .key(keys.outbox_at(voucher_id, k, shards))
            .key(keys.seq_at(voucher_id, k, shards))
            .arg(part)
            .arg(RELAY_GROUP)
            .invoke_async(&mut conn)
            .await
            .context("voucher_load.lua")?;
        all &= loaded == 1;
    }
    register_outbox(redis, keys, voucher_id, shards).await?;
    Ok(all)
}

/// Lists the voucher's outboxes (one per shard) for the relays (a key of its own
/// slot, so not in the load script: on Redis Cluster a script keeps to one slot).
pub async fn register_outbox(redis: &Redis, keys: &Keys, voucher_id: i64, shards: u32) -> Result<()> {
    let mut conn = redis.conn().await?;
    let members: Vec<String> = (0..shards.max(1))
        .map(|k| Keys::outbox_member(voucher_id, k, shards))
        .collect();
    let _: i64 = redis::cmd("SADD")
        .arg(keys.outboxes())
        .arg(members)
        .query_async(&mut conn)
        .await
        .context("registering an outbox")?;
    Ok(())
}

/// A sale's live numbers in Redis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// Units on sale over all shards (units in transit between shards excluded);
    /// None while a shard's stock is missing.
    pub stock: Option<i64>,
    /// Orders Redis admitted, over all shards.
    pub accepted: i64,
    /// Each shard's stock (one entry for a sale of one shard).
    pub shards: Vec<Option<i64>>,
}

/// Live stock and the number of orders Redis admitted (one pipelined call).
pub async fn stats(redis: &Redis, keys: &Keys, voucher_id: i64, shards: u32) -> Result<Stats> {
    let mut conn = redis.conn().await?;
    let mut pipe = redis::pipe();
    for k in 0..shards.max(1) {
        pipe.get(keys.stock_at(voucher_id, k, shards))
            .get(keys.admitted_at(voucher_id, k, shards))
            .hlen(keys.orders_at(voucher_id, k, shards));
    }
    let reply: Vec<Option<i64>> = pipe.query_async(&mut conn).await.context("reading voucher stats")?;
    let shards: Vec<Option<i64>> = reply.iter().step_by(3).copied().collect();
    Ok(Stats {
        stock: shards.iter().copied().sum(),
        // The counter, plus the index an older version kept (see `Keys::orders`).
        accepted: reply.chunks(3).map(|r| r[1].unwrap_or(0) + r[2].unwrap_or(0)).sum(),
        shards,
    })
}

/// How old the units on sale that the public voucher view shows may be.
pub const PUBLIC_REFRESH: std::time::Duration = std::time::Duration::from_millis(500);

/// Units on sale now: the sum of the shards' stock (one `GET` a shard; `None`
/// while Redis has no stock for the sale).
pub async fn remaining(redis: &Redis, keys: &Keys, voucher_id: i64, shards: u32) -> Result<Option<i64>> {
    let mut conn = redis.conn().await?;
    let mut pipe = redis::pipe();
    for k in 0..shards.max(1) {
        pipe.get(keys.stock_at(voucher_id, k, shards));
    }
    let reply: Vec<Option<i64>> = pipe.query_async(&mut conn).await.context("reading the units on sale")?;
    Ok(reply.into_iter().sum())
}

/// An event every instance's cache listens to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The voucher was created or changed: reload it.
    Voucher(i64),
    /// Stock came back: forget that it was sold out.
    Stock(i64),
}

impl Event {
    pub fn encode(self) -> String {
        match self {
            Event::Voucher(id) => format!("voucher:{id}"),
            Event::Stock(id) => format!("stock:{id}"),
        }
    }

    pub fn decode(s: &str) -> Option<Self> {
        let (kind, id) = s.split_once(':')?;
        let id = id.parse().ok()?;
        match kind {
            "voucher" => Some(Event::Voucher(id)),
            "stock" => Some(Event::Stock(id)),
            _ => None,
        }
    }
}

pub async fn publish(redis: &Redis, keys: &Keys, event: Event) -> Result<()> {
    let mut conn = redis.conn().await?;
    let _: i64 = redis::cmd("PUBLISH")
        .arg(keys.events())
        .arg(event.encode())
        .query_async(&mut conn)
        .await
        .context("publishing a voucher event")?;
    Ok(())
}
