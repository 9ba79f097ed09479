//! The Redis side of a flash sale: loading stock, reading stats, and telling every
//! instance that a voucher or its stock changed (top-ups: [`super::topup`]).
use crate::keys::{Keys, RELAY_GROUP};
use crate::redis_conn::Redis;
use anyhow::{Context, Result};
use redis::Script;
use std::sync::LazyLock;

static LOAD: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/voucher_load.lua")));

/// Loads stock (if no stock key exists) and makes the outbox consumer group exist.
pub async fn load(redis: &Redis, keys: &Keys, voucher_id: i64, stock: i32) -> Result<bool> {
    let mut conn = redis.conn().await?;
    let loaded: i64 = LOAD
        .key(keys.stock(voucher_id))
        .key(keys.outbox(voucher_id))
        .arg(stock)
        .arg(RELAY_GROUP)
        .invoke_async(&mut conn)
        .await
        .context("voucher_load.lua")?;
    register_outbox(redis, keys, voucher_id).await?;
    Ok(loaded == 1)
}

/// Lists the voucher's outbox for the relays (a key of its own slot, so not in the
/// load script: on Redis Cluster a script keeps to one slot).
pub async fn register_outbox(redis: &Redis, keys: &Keys, voucher_id: i64) -> Result<()> {
    let mut conn = redis.conn().await?;
    let _: i64 = redis::cmd("SADD")
        .arg(keys.outboxes())
        .arg(voucher_id)
        .query_async(&mut conn)
        .await
        .context("registering an outbox")?;
    Ok(())
}

/// Live stock and the number of orders Redis admitted.
pub async fn stats(redis: &Redis, keys: &Keys, voucher_id: i64) -> Result<(Option<i64>, i64)> {
    let mut conn = redis.conn().await?;
    let (stock, accepted): (Option<i64>, i64) = redis::pipe()
        .get(keys.stock(voucher_id))
        .hlen(keys.orders(voucher_id))
        .query_async(&mut conn)
        .await
        .context("reading voucher stats")?;
    Ok((stock, accepted))
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
