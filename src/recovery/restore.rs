//! Writing a sale's shards back from its books (`lua/sale_restore.lua`), each step
//! fenced by the exact sequence the previous one left.
use super::desk::Recovery;
use super::snapshot::{Books, Shard};
use crate::keys::RELAY_GROUP;
use anyhow::{bail, Context, Result};
use redis::{Script, ScriptInvocation};
use std::sync::LazyLock;

static RESTORE: LazyLock<Script> = LazyLock::new(|| Script::new(crate::shard_script!("sale_restore")));

/// Marks, returned orders or top-ups per `fill` call at most.
const CHUNK: usize = 2000;
/// Orders per outbox entry a repair writes back.
const REQUEUE_PER_ENTRY: usize = 1000;

impl Recovery {
    /// `lua/sale_restore.lua` on one shard: `op` of the repair of generation `gen`,
    /// expecting the shard at sequence `at` (ignored by `close`), its write named
    /// afresh.
    pub(super) fn restore_script(
        &self,
        voucher: i64,
        shard: u32,
        shards: u32,
        gen: i64,
        op: &str,
        at: i64,
    ) -> ScriptInvocation<'static> {
        let k = &self.keys;
        let mut inv = RESTORE.key(k.stock_at(voucher, shard, shards));
        inv.key(k.buyers_at(voucher, shard, shards))
            .key(k.admitted_at(voucher, shard, shards))
            .key(k.returned_at(voucher, shard, shards))
            .key(k.outbox_at(voucher, shard, shards))
            .key(k.seq_at(voucher, shard, shards))
            .key(k.given_at(voucher, shard, shards))
            .key(k.moved_at(voucher, shard, shards))
            .key(k.taken_at(voucher, shard, shards))
            .key(k.orders_at(voucher, shard, shards))
            .key(k.topups_at(voucher, shard, shards))
            .key(k.hist_at(voucher, shard, shards))
            .arg(gen)
            .arg(op)
            .arg(at)
            .arg(crate::recovery::history::fresh_name().as_slice());
        inv
    }

    /// Writes every shard of the sale back from `books` and reopens it; `seqs`
    /// holds each shard's sequence as the close left it, and as this leaves it.
    pub(super) async fn rebuild(
        &self,
        voucher: i64,
        shards: u32,
        gen: i64,
        books: &Books,
        seqs: &mut [i64],
    ) -> Result<()> {
        let sale = Sale { voucher, shards, gen };
        let mut conn = self.redis.conn().await?;
        if let Some(over) = books.over_stock() {
            tracing::error!(
                voucher,
                pg_stock = books.pg_stock,
                in_flight = books.in_flight.len() + books.unnamed,
                over,
                "INCIDENT: more orders in flight than Postgres has stock"
            );
            self.metrics
                .worker_incidents
                .with_label_values(&["repair_over_stock"])
                .inc();
        }
        let topups: Vec<String> = books.topups.iter().map(|t| t.to_string()).collect();
        let (by_shard, twice) = books.shards(voucher, shards);
        if twice > 0 {
            self.metrics
                .worker_incidents
                .with_label_values(&["repair_two_orders"])
                .inc_by(twice as u64);
        }
        for (k, shard) in by_shard.into_iter().enumerate() {
            let clear = self.restore_script(voucher, k as u32, shards, gen, "clear", seqs[k]);
            seqs[k] = step(
                clear.invoke_async(&mut conn).await.context("sale_restore.lua clear")?,
                voucher,
                k,
            )?;
            self.fill(&mut conn, sale, k, &shard, &topups, &mut seqs[k]).await?;
        }
        self.requeue(&mut conn, sale, books, seqs).await?;
        for (k, part) in crate::keys::split(books.stock_left(), shards).into_iter().enumerate() {
            let mut open = self.restore_script(voucher, k as u32, shards, gen, "open", seqs[k]);
            open.arg(part).arg(RELAY_GROUP);
            seqs[k] = step(
                open.invoke_async(&mut conn).await.context("sale_restore.lua open")?,
                voucher,
                k,
            )?;
        }
        crate::sales::stock::register_outbox(&self.redis, &self.keys, voucher, shards).await?;
        Ok(())
    }

    /// Writes shard `k`'s marks, admitted count, returned orders and the sale's
    /// top-ups, [`CHUNK`] of each per call; `seq` is the shard's sequence before
    /// and after.
    async fn fill(
        &self,
        conn: &mut crate::redis_conn::Conn,
        sale: Sale,
        k: usize,
        shard: &Shard,
        topups: &[String],
        seq: &mut i64,
    ) -> Result<()> {
        let marks: Vec<(&i64, &String)> = shard.marks.iter().collect();
        // One round at least: each sets the shard's count of admitted orders (a
        // set, not an increment).
        let rounds = marks
            .len()
            .max(shard.returned.len())
            .max(topups.len())
            .div_ceil(CHUNK)
            .max(1);
        for r in 0..rounds {
            let part = |len: usize| (r * CHUNK).min(len)..((r + 1) * CHUNK).min(len);
            let mut inv = self.restore_script(sale.voucher, k as u32, sale.shards, sale.gen, "fill", *seq);
            let m = &marks[part(marks.len())];
            inv.arg(m.len());
            for (user, mark) in m {
                inv.arg(**user).arg(mark.as_str());
            }
            inv.arg(shard.admitted);
            let ret = &shard.returned[part(shard.returned.len())];
            inv.arg(ret.len());
            for id in ret {
                inv.arg(id);
            }
            let t = &topups[part(topups.len())];
            inv.arg(t.len());
            for id in t {
                inv.arg(id.as_str());
            }
            *seq = step(
                inv.invoke_async(conn).await.context("sale_restore.lua fill")?,
                sale.voucher,
                k,
            )?;
        }
        Ok(())
    }

    /// Writes orders found in an intent only back into their shard's outbox.
    async fn requeue(
        &self,
        conn: &mut crate::redis_conn::Conn,
        sale: Sale,
        books: &Books,
        seqs: &mut [i64],
    ) -> Result<()> {
        let mut requeue: Vec<Vec<String>> = vec![Vec::new(); sale.shards as usize];
        for o in &books.requeue {
            let k = crate::keys::shard_of(o.user_id, sale.shards) as usize;
            requeue[k].push(format!("{},{},{}", o.id, o.user_id, o.created_ms));
        }
        for (k, orders) in requeue.iter().enumerate() {
            for part in orders.chunks(REQUEUE_PER_ENTRY) {
                let mut inv = self.restore_script(sale.voucher, k as u32, sale.shards, sale.gen, "requeue", seqs[k]);
                inv.arg(sale.voucher).arg(part.join(",")).arg(self.formats.writes());
                seqs[k] = step(
                    inv.invoke_async(conn).await.context("sale_restore.lua requeue")?,
                    sale.voucher,
                    k,
                )?;
            }
        }
        if !books.requeue.is_empty() {
            tracing::warn!(
                voucher = sale.voucher,
                orders = books.requeue.len(),
                "orders in a relay's intent only, written back into their outboxes to be published again"
            );
        }
        for o in &books.rescued {
            self.metrics
                .worker_incidents
                .with_label_values(&["rescued_order"])
                .inc();
            tracing::error!(
                voucher_id = sale.voucher,
                order_id = o.id,
                user_id = o.user_id,
                "INCIDENT: an acknowledged order Redis lost going back in time, before any relay read it, \
                 was written back from the memory of the process that acknowledged it"
            );
        }
        Ok(())
    }
}

/// The sale a repair rebuilds: the voucher, its shards and the repair's generation.
#[derive(Clone, Copy)]
struct Sale {
    voucher: i64,
    shards: u32,
    gen: i64,
}

/// A step's reply: the shard's sequence now, or an error if the shard was not where
/// the repair left it (a newer repair, or Redis went back during this one).
fn step(reply: (i64, i64), voucher: i64, shard: usize) -> Result<i64> {
    match reply {
        (1, seq) => Ok(seq),
        (_, seq) => bail!(
            "shard {shard} of sale {voucher} is not where this repair left it (at {seq}): \
             a newer repair took it, or it went back; this repair stops"
        ),
    }
}
