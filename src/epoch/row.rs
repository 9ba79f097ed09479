//! The epoch row of a namespace in Postgres (`redis_epochs`, with the highest
//! Redis clock recorded), and its read.
use anyhow::{Context, Result};
use sqlx::PgPool;

/// The epoch row of a namespace.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct EpochRow {
    pub epoch: i64,
    pub server: String,
    pub repairing: bool,
    /// The highest Redis clock recorded (0 if none yet), whatever epoch recorded
    /// it: during a repair, the last finished epoch's value, which a server that
    /// did not go back is not below.
    pub clock: i64,
    /// While `repairing`: the sales under repair (`None`: every sale). Only a
    /// scope written by the repair of this very epoch counts.
    pub repair_scope: Option<Vec<i64>>,
}

pub async fn read_row(pg: &PgPool, namespace: &str) -> Result<Option<EpochRow>> {
    sqlx::query_as(
        "SELECT e.epoch, e.server, e.repairing, COALESCE(c.clock, 0) AS clock,
                CASE WHEN e.repair_scope_epoch = e.epoch THEN e.repair_scope END AS repair_scope
           FROM redis_epochs e
           LEFT JOIN redis_clocks c ON c.namespace = e.namespace
          WHERE e.namespace = $1",
    )
    .bind(namespace)
    .fetch_optional(pg)
    .await
    .context("reading the Redis epoch")
}
