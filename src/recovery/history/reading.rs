//! A shard read as a caller that remembers points of its history
//! (`lua/shard_read.lua`), and the points writers record in Postgres for every
//! process to check.
use super::point::Snapshot;
use crate::keys::Keys;
use crate::redis_conn::Conn;
use anyhow::{Context, Result};
use redis::Script;
use sqlx::PgPool;
use std::sync::LazyLock;

use super::point::Point;

/// `lua/shard_read.lua` after `lua/history.lua`.
pub const SHARD_READ_SOURCE: &str = crate::shard_script!("shard_read");
static SHARD_READ: LazyLock<Script> = LazyLock::new(|| Script::new(SHARD_READ_SOURCE));

/// A shard as [`read_shard`] found it, at one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardRead {
    /// Its stock key is there (it is neither lost nor closed for a repair).
    pub open: bool,
    pub seq: i64,
    /// It no longer holds a point the caller passed: it went back in time.
    pub lost: bool,
    /// The shopper's mark, when one was asked for and is there.
    pub mark: Option<String>,
}

/// Reads the shard whose hash tag is `tag`: whether it is open, whether it holds
/// every point of `snap`, and `user`'s mark (when given), all at one instant.
pub async fn read_shard(
    conn: &mut Conn,
    keys: &Keys,
    tag: &str,
    snap: &Snapshot,
    user: Option<i64>,
) -> Result<ShardRead> {
    let mut inv = SHARD_READ.key(keys.of_tag(tag, "stock"));
    inv.key(keys.of_tag(tag, "seq")).key(keys.of_tag(tag, "hist"));
    if let Some(u) = user {
        inv.key(keys.of_tag(tag, "buyers"));
        inv.arg(snap.seqs()).arg(snap.names()).arg(u);
    } else {
        inv.arg(snap.seqs()).arg(snap.names());
    }
    let (open, seq, lost, mark): (i64, i64, i64, Option<String>) =
        inv.invoke_async(conn).await.context("shard_read.lua")?;
    Ok(ShardRead {
        open: open == 1,
        seq,
        lost: lost == 1,
        mark,
    })
}

/// Records `point` of shard `tag` as what `writer` (a process's role) saw, in
/// Postgres, where every process learns it ([`Histories::refresh`]): the row
/// moves only forward, and each writer's points follow one another (its calls
/// each checked the point before), so its latest stands for all of them.
pub async fn record(pg: &PgPool, namespace: &str, writer: &str, tag: &str, point: Point) -> anyhow::Result<()> {
    use anyhow::Context;
    sqlx::query(
        "INSERT INTO shard_points (namespace, tag, writer, seq, name) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (namespace, tag, writer) DO UPDATE SET seq = EXCLUDED.seq, name = EXCLUDED.name,
                updated_at = now()
          WHERE shard_points.seq < EXCLUDED.seq",
    )
    .bind(namespace)
    .bind(tag)
    .bind(writer)
    .bind(point.seq)
    .bind(point.name.as_slice())
    .execute(pg)
    .await
    .context("recording a shard's point")?;
    Ok(())
}
