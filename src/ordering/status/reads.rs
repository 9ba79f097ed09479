//! A lookup's read of a shard: with this process's points of its history, and
//! what a shard lost, closed or gone back asks for.
use super::Lookup;
use crate::redis_conn::Conn;
use anyhow::{Context, Result};

impl Lookup {
    /// Shard `k` of `voucher`'s sale read with this process's points of it (and
    /// the sale's generation it knows), `user`'s mark too when given.
    pub(super) async fn read_shard(
        &self,
        mut conn: Conn,
        voucher: i64,
        k: u32,
        shards: u32,
        user: Option<i64>,
    ) -> Result<crate::recovery::history::ShardRead> {
        let tag = crate::keys::shard_tag(voucher, k, shards);
        let call = crate::recovery::history::Call::on(self.recovery.histories.shard(&tag));
        let read = crate::recovery::history::read_shard(&mut conn, &self.keys, &tag, &call.snap, user)
            .await
            .context("looking up a pending order")?;
        if !read.lost {
            call.passed(read.seq, false);
        }
        Ok(read)
    }

    /// A lookup met a shard lost, closed or gone back: its sale's repair is asked for.
    pub(super) fn unsound(&self, voucher: i64, read: &crate::recovery::history::ShardRead) {
        self.recovery.lost(
            voucher,
            if read.lost {
                "a shard went back in time (an order lookup found it no longer holds what this process saw)"
            } else {
                "a shard's stock is missing in Redis (an order lookup found it)"
            },
        );
    }
}
