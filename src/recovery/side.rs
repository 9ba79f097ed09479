//! Writes of a shard besides the orders' (a stock return, a top-up, a move's give
//! or take, a late admission): each checks this process's points of the shard and
//! names itself like an order's, and, like an order, is acknowledged only once the
//! replicas hold it (`SECKILL_REDIS_WAIT_REPLICAS`: the script and `WAIT` in one
//! pipeline, on a link of its own); then its point is recorded in Postgres, for
//! every process to check (`shard_points`, this process's `side-` row), beside
//! the caller rather than before it goes on.
//!
//! A write short of its replicas is not acknowledged: its caller leaves what it
//! does pending (a return or a top-up stays to be applied again, idempotently; a
//! move stays in transit, registered, and is replayed), so a failover that loses
//! the write loses nothing anyone acted on: a give is never followed by its take,
//! nor a take by closing its give, before the replicas hold it.
//!
//! This process's side writes on one shard run one at a time (each checks the
//! point the one before it recorded): the points of one writer's row form one
//! history, so its latest stands for all of them.
use super::desk::Recovery;
use super::history::{record, Call, Point};
use crate::redis_conn::Conn;
use anyhow::{Context, Result};
use redis::{Script, Value};

/// What a side write's script said, and whether the replicas hold it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SideWrite {
    /// The script's code (see each script).
    pub code: i64,
    /// The shard's sequence after it.
    pub seq: i64,
    /// False when fewer replicas than required hold the shard as the script left
    /// it (its write, or the earlier try's it found done): not to be acted on.
    pub acked: bool,
}

/// How a side script's reply reads: (code, sequence, whether it wrote).
pub type Reads = fn(&Value) -> Result<(i64, i64, bool)>;

/// A `{code, seq}` reply whose code 1 says the script wrote.
pub fn wrote_on_one(v: &Value) -> Result<(i64, i64, bool)> {
    let (code, seq): (i64, i64) = redis::from_redis_value_ref(v)?;
    Ok((code, seq, code == 1))
}

/// A `{code, seq, wrote}` reply.
pub fn wrote_flag(v: &Value) -> Result<(i64, i64, bool)> {
    let (code, seq, wrote): (i64, i64, i64) = redis::from_redis_value_ref(v)?;
    Ok((code, seq, wrote == 1))
}

/// One side write: the shard's tag, the script and its keys, the points it passes
/// beyond this process's (e.g. the sale's generation), and its arguments, given
/// the call (its points and its name).
pub struct Side<'a> {
    pub tag: &'a str,
    pub script: &'a Script,
    pub keys: Vec<String>,
    pub also: Option<Point>,
    pub reads: Reads,
}

impl Recovery {
    /// Runs `side` on `conn` (on the replicas' link when orders wait for replicas),
    /// with the arguments `args` builds from the call; see the module above. A
    /// shard that no longer holds a point (code -4) is left to the caller.
    pub async fn side_write(
        &self,
        conn: &mut Conn,
        side: Side<'_>,
        args: impl FnOnce(&Call) -> Vec<Vec<u8>>,
    ) -> Result<SideWrite> {
        let shard = self.histories.shard(side.tag);
        let _one = shard.side().await;
        let mut call = Call::on(shard.clone());
        if let Some(p) = side.also {
            call = call.and(p);
        }
        let args = args(&call);
        let (reply, acked) = match &self.replicas {
            None => {
                let mut inv = side.script.prepare_invoke();
                for k in &side.keys {
                    inv.key(k);
                }
                for a in &args {
                    inv.arg(a.as_slice());
                }
                (inv.invoke_async::<Value>(conn).await.context("a side write")?, true)
            }
            Some(r) => {
                let mut link = r.link.conn().await?;
                let fence = format!("{}:fence", side.keys[0]);
                let (reply, n) = crate::redis_conn::script_and_wait(
                    &mut link,
                    side.script,
                    &side.keys,
                    &args,
                    &fence,
                    r.replicas,
                    r.deadline,
                )
                .await
                .context("a side write + WAIT")?;
                (reply, n >= r.replicas as i64)
            }
        };
        let (code, seq, wrote) = (side.reads)(&reply)?;
        if code == -4 {
            return Ok(SideWrite { code, seq, acked: true });
        }
        if !acked {
            // Wrote now, or found its step done by an earlier try: either way
            // the replicas may not hold it yet.
            call.passed(seq, false);
            tracing::warn!(
                shard = side.tag,
                wrote,
                "a side write is short of its replicas: left pending"
            );
            return Ok(SideWrite {
                code,
                seq,
                acked: false,
            });
        }
        let point = call.passed(seq, wrote);
        // Recorded beside the caller, not before it answers: a refill runs on the
        // order path, which waits for no Postgres. A record lost (Postgres away,
        // the process killed) is covered by this writer's next: the points of one
        // row form one history, and a later one checks everything before it.
        let (pg, ns, writer, tag) = (
            self.pg.clone(),
            self.namespace().to_owned(),
            self.side_writer.clone(),
            side.tag.to_owned(),
        );
        tokio::spawn(async move {
            if let Err(e) = record(&pg, &ns, &writer, &tag, point).await {
                tracing::warn!(shard = tag, error = %format!("{e:#}"), "recording a side write's point failed");
            }
        });
        Ok(SideWrite { code, seq, acked: true })
    }
}
