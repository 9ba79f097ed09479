//! The sales' generations as the other areas respect them. A repair takes a sale's
//! next generation by updating its `sale_states` row; a relay reads the
//! generations to settle orders read before a repair ([`Recovery::generations`]),
//! and records an intent only while its sales are still at the generations its
//! orders are of, holding their rows shared in the same statement
//! ([`GENERATIONS_HELD`]): one statement, so that a repair waits for milliseconds
//! of Postgres's work, never for a relay process that froze between two.
use super::desk::Recovery;
use anyhow::{Context, Result};
use std::collections::HashMap;

/// Common table expressions for one statement that records what a relay is about
/// to publish: `held` holds the `sale_states` rows of the sales `$2` shared,
/// `moved` has a row if one of them is no longer at the generation its orders are
/// of (`$6`, beside `$2`), and `points` records the relay's points of the shards
/// (`$7` tags, `$8` sequences, `$9` names) as writer `$10`'s, unless one moved
/// (see [`super::history::record`]: a row moves only forward). `$1` is the
/// namespace. The statement that follows writes only `WHERE NOT EXISTS (SELECT 1
/// FROM moved)`.
pub const GENERATIONS_HELD: &str = "WITH held AS (
             SELECT voucher_id, gen FROM sale_states
              WHERE namespace = $1 AND voucher_id = ANY($2::bigint[])
              ORDER BY voucher_id FOR SHARE
         ), moved AS (
             SELECT 1 FROM unnest($2::bigint[], $6::bigint[]) AS x(v, g) JOIN held h ON h.voucher_id = x.v
              WHERE h.gen <> x.g LIMIT 1
         ), points AS (
             INSERT INTO shard_points (namespace, tag, writer, seq, name)
             SELECT $1, t, $10, s, n FROM unnest($7::text[], $8::bigint[], $9::bytea[]) AS x(t, s, n)
              WHERE NOT EXISTS (SELECT 1 FROM moved) ORDER BY t
             ON CONFLICT (namespace, tag, writer) DO UPDATE
                SET seq = EXCLUDED.seq, name = EXCLUDED.name, updated_at = now()
              WHERE shard_points.seq < EXCLUDED.seq
         )";

impl Recovery {
    /// Each sale's generation in Postgres (rows made for sales that have none, so
    /// that an intent can hold them shared).
    pub async fn generations(&self, vouchers: &[i64]) -> Result<HashMap<i64, i64>> {
        let mut vouchers = vouchers.to_vec();
        vouchers.sort_unstable();
        vouchers.dedup();
        let fresh: Vec<i64> = {
            let known = self.states_made.lock().expect("states poisoned");
            vouchers.iter().filter(|v| !known.contains(v)).copied().collect()
        };
        if !fresh.is_empty() {
            sqlx::query(
                "INSERT INTO sale_states (namespace, voucher_id) SELECT $1, v FROM unnest($2::bigint[]) AS v
                 ON CONFLICT DO NOTHING",
            )
            .bind(self.namespace())
            .bind(&fresh)
            .execute(&self.pg)
            .await
            .context("making the sales' states")?;
            self.states_made.lock().expect("states poisoned").extend(fresh);
        }
        let rows: Vec<(i64, i64)> =
            sqlx::query_as("SELECT voucher_id, gen FROM sale_states WHERE namespace = $1 AND voucher_id = ANY($2)")
                .bind(self.namespace())
                .bind(&vouchers)
                .fetch_all(&self.pg)
                .await
                .context("reading the sales' generations")?;
        Ok(rows.into_iter().collect())
    }

    /// The namespace's workers' last `limit` heartbeats, newest first (shown beside
    /// the sales' states; nothing is decided from them).
    pub async fn workers_seen(&self, limit: i64) -> Result<Vec<crate::ordering::worker::Heartbeat>> {
        crate::ordering::worker::last_heartbeats(&self.pg, self.namespace(), limit)
            .await
            .context("reading the workers' heartbeats")
    }

    /// The sales a repair holds closed now (any process's), by id.
    pub async fn closed_sales(&self) -> Result<Vec<i64>> {
        sqlx::query_scalar("SELECT voucher_id FROM sale_states WHERE namespace = $1 AND closed_since IS NOT NULL")
            .bind(self.namespace())
            .fetch_all(&self.pg)
            .await
            .context("reading the sales closed now")
    }
}
