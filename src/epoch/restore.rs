//! Rewriting one sale in Redis from Postgres and its outbox, fenced by the epoch.
use super::guard::EpochGuard;
use crate::keys::RELAY_GROUP;
use anyhow::{bail, Context, Result};
use redis::{Script, ScriptInvocation};
use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

static RESTORE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/sale_restore.lua")));

impl EpochGuard {
    /// `lua/sale_restore.lua` on one shard of a sale, fenced by `epoch`.
    fn restore_script(&self, voucher: i64, shard: u32, shards: u32, epoch: i64, op: &str) -> ScriptInvocation<'static> {
        let k = &self.keys;
        let mut inv = RESTORE.key(k.stock_at(voucher, shard, shards));
        inv.key(k.buyers_at(voucher, shard, shards))
            .key(k.admitted_at(voucher, shard, shards))
            .key(k.returned_at(voucher, shard, shards))
            .key(k.outbox_at(voucher, shard, shards))
            .key(k.repair_fence_at(voucher, shard, shards))
            .key(k.given_at(voucher, shard, shards))
            .key(k.moved_at(voucher, shard, shards))
            .key(k.taken_at(voucher, shard, shards))
            .key(k.orders_at(voucher, shard, shards))
            .arg(epoch)
            .arg(op);
        inv
    }

    /// Closes every shard of `sales` (`reset`: the stock key goes, fenced by
    /// `epoch`) the moment a repair has its epoch, before its barrier waits: from
    /// then on no process can admit, return or move a unit on these sales, whatever
    /// it believes about the server (one cut from Postgres still trusts the epoch it
    /// verified last), until the repair reopens them.
    pub(super) async fn close_sales(&self, epoch: i64, sales: &[i64]) -> Result<()> {
        let shards: Vec<(i64, i32)> = sqlx::query_as(
            "SELECT voucher_id, stock_shards FROM seckill_vouchers WHERE voucher_id = ANY($1) ORDER BY voucher_id",
        )
        .bind(sales)
        .fetch_all(&self.pg)
        .await?;
        let mut conn = self.redis.conn().await?;
        for (voucher, n) in shards {
            let n = n.max(1) as u32;
            for shard in 0..n {
                let ok: i64 = self
                    .restore_script(voucher, shard, n, epoch, "reset")
                    .invoke_async(&mut conn)
                    .await
                    .context("sale_restore.lua reset")?;
                if ok != 1 {
                    bail!("a newer repair took voucher {voucher}; this one stops");
                }
            }
        }
        Ok(())
    }

    /// Rewrites one sale, every shard of it, from Postgres and its outbox streams,
    /// fenced by `epoch`: remaining stock = Postgres's stock − orders still in an
    /// outbox, spread over the shards as at load; each live order's shopper mark, and
    /// the count of every order (Postgres's and the outbox's) as admitted, in its
    /// shopper's shard; the move ledgers cleared.
    pub(super) async fn restore_sale(
        &self,
        tx: &mut sqlx::PgConnection,
        epoch: i64,
        voucher: i64,
        pg_stock: i32,
        shards: u32,
    ) -> Result<()> {
        let k = &self.keys;
        let orders: Vec<(i64, i64, chrono::DateTime<chrono::Utc>, String)> =
            sqlx::query_as("SELECT id, user_id, created_at, status FROM voucher_orders WHERE voucher_id = $1")
                .bind(voucher)
                .fetch_all(&mut *tx)
                .await?;
        let mut conn = self.redis.conn().await?;
        let fenced = |shard: u32, op: &str| self.restore_script(voucher, shard, shards, epoch, op);
        let check = |ok: i64| -> Result<()> {
            if ok != 1 {
                bail!("a newer repair took voucher {voucher}; this one stops");
            }
            Ok(())
        };
        // Close every shard again (the repair closed them when it took its epoch, see
        // `close_sales`): whatever a process that had not noticed the repair wrote
        // since goes too, the outboxes read next are complete, and no move can give
        // or take.
        for shard in 0..shards {
            check(
                fenced(shard, "reset")
                    .invoke_async(&mut conn)
                    .await
                    .context("sale_restore.lua reset")?,
            )?;
        }
        let mut outbox = Vec::new();
        for shard in 0..shards {
            outbox.extend(read_outbox(&mut conn, &k.outbox_at(voucher, shard, shards)).await?);
        }
        let shard_of = |user: i64| crate::keys::shard_of(user, shards) as usize;
        let stored: HashSet<i64> = orders.iter().map(|o| o.0).collect();
        // user -> (order id, created_ms): the mark reserve.lua writes is "id:ms".
        let mut buyers: Vec<HashMap<i64, (i64, i64)>> = vec![HashMap::new(); shards as usize];
        let mut admitted: Vec<usize> = vec![0; shards as usize];
        let mut returned: Vec<Vec<i64>> = vec![Vec::new(); shards as usize];
        for (id, user, at, status) in &orders {
            let s = shard_of(*user);
            admitted[s] += 1;
            match status.as_str() {
                "created" | "paid" => {
                    buyers[s].insert(*user, (*id, at.timestamp_millis()));
                }
                "cancelled" => returned[s].push(*id),
                _ => {}
            }
        }
        let mut in_flight = HashSet::new();
        for o in outbox.iter().filter(|o| !stored.contains(&o.id)) {
            if !in_flight.insert(o.id) {
                continue;
            }
            let s = shard_of(o.user_id);
            admitted[s] += 1;
            if let Some((other, _)) = buyers[s].insert(o.user_id, (o.id, o.created_ms)) {
                tracing::error!(
                    voucher,
                    user_id = o.user_id,
                    order_id = o.id,
                    other,
                    "INCIDENT: a shopper has two admitted orders (one in the outbox)"
                );
            }
        }
        let mut stock_left = pg_stock as i64 - in_flight.len() as i64;
        if stock_left < 0 {
            tracing::error!(
                voucher,
                pg_stock,
                in_flight = in_flight.len(),
                "INCIDENT: more orders in flight than Postgres has stock"
            );
            stock_left = 0;
        }
        for shard in 0..shards {
            let s = shard as usize;
            let buyers: Vec<(i64, String)> = buyers[s]
                .iter()
                .map(|(u, (id, ms))| (*u, format!("{id}:{ms}")))
                .collect();
            let returned = &returned[s];
            const CHUNK: usize = 2000;
            // One round at least: each sets the shard's count of admitted orders (a
            // set, not an increment: a call sent twice writes the same).
            let rounds = buyers.len().max(returned.len()).div_ceil(CHUNK).max(1);
            for r in 0..rounds {
                let part = |len: usize| (r * CHUNK).min(len)..((r + 1) * CHUNK).min(len);
                let mut inv = fenced(shard, "fill");
                let b = &buyers[part(buyers.len())];
                inv.arg(b.len());
                for (user, mark) in b {
                    inv.arg(user).arg(mark);
                }
                inv.arg(admitted[s]);
                let ret = &returned[part(returned.len())];
                inv.arg(ret.len());
                for id in ret {
                    inv.arg(id);
                }
                check(inv.invoke_async(&mut conn).await.context("sale_restore.lua fill")?)?;
            }
        }
        for (shard, part) in crate::keys::split(stock_left, shards).into_iter().enumerate() {
            let mut open = fenced(shard as u32, "open");
            open.arg(part).arg(RELAY_GROUP);
            check(open.invoke_async(&mut conn).await.context("sale_restore.lua open")?)?;
        }
        crate::voucher::stock::register_outbox(&self.redis, k, voucher, shards).await?;
        tracing::warn!(
            voucher,
            shards,
            stock_left,
            persisted = orders.len(),
            in_outbox = in_flight.len(),
            "flash sale rebuilt in Redis"
        );
        Ok(())
    }
}

/// Every order still in an outbox stream (relayed or not: the stream keeps an entry
/// until its relay's publish was confirmed).
pub async fn read_outbox(conn: &mut crate::redis_conn::Conn, stream: &str) -> Result<Vec<crate::order::OrderMsg>> {
    let mut out = Vec::new();
    let mut from = "-".to_owned();
    loop {
        let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
            .arg(stream)
            .arg(&from)
            .arg("+")
            .arg("COUNT")
            .arg(5000)
            .query_async(conn)
            .await
            .context("reading an outbox")?;
        let n = reply.ids.len();
        for e in &reply.ids {
            if let Some(orders) = crate::outbox::entry::parse(e, 0) {
                out.extend(orders);
            }
        }
        match reply.ids.last() {
            Some(last) if n == 5000 => from = format!("({}", last.id),
            _ => return Ok(out),
        }
    }
}
