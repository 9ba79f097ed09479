//! The Redis clock: a number that only goes up, advanced in Redis by every healthy
//! check and recorded in Postgres (`redis_clocks`), so that a Redis holding a value
//! below the one recorded is known to have gone back in time, whatever its
//! `run_id` says (see the module above).
//!
//! The order of a check makes a concurrent one harmless: Postgres is read before
//! Redis, and a value is recorded only after Redis returned it, so a value read
//! from Postgres was in Redis before the read of Redis began. A server that did
//! not go back is therefore never below it; one that did stays below it until a
//! repair sets it: the script advances no clock that is behind the value its check
//! read (only a check whose read of Postgres came before the last record can
//! advance it, by one: the margin shrinks by at most the checks in flight).
use anyhow::{bail, Context, Result};
use redis::Value;

/// What a check's tick found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Tick {
    /// The clock was at or above the recorded value and is advanced to `value`;
    /// otherwise it was `value`, below the recorded one, and is left there.
    pub advanced: bool,
    pub value: i64,
}

/// Adds the tick to a check's pipeline: `lua/clock_tick.lua` on `clock`, given
/// the value Postgres recorded. EVAL (the script is a few lines): a pipeline
/// cannot load a script on the way.
pub(super) fn tick(pipe: &mut redis::Pipeline, clock: &str, recorded: i64) {
    pipe.cmd("EVAL")
        .arg(include_str!("../../lua/clock_tick.lua"))
        .arg(1)
        .arg(clock)
        .arg(recorded);
}

/// The tick's reply (an error if Redis refused it: a replica refuses the write).
pub(super) fn read_tick(reply: &Value) -> Result<Tick> {
    let (advanced, value): (i64, i64) =
        redis::from_redis_value_ref(reply).with_context(|| format!("advancing the Redis clock: {reply:?}"))?;
    Ok(Tick {
        advanced: advanced == 1,
        value,
    })
}

/// Records a value the clock was advanced to, in `epoch` only (a check of an
/// epoch a repair has replaced records nothing). One small UPDATE per check.
pub(super) async fn record(pg: &sqlx::PgPool, namespace: &str, epoch: i64, value: i64) -> Result<()> {
    sqlx::query("UPDATE redis_clocks SET clock = GREATEST(clock, $3) WHERE namespace = $1 AND epoch = $2")
        .bind(namespace)
        .bind(epoch)
        .bind(value)
        .execute(pg)
        .await
        .context("recording the Redis clock")?;
    Ok(())
}

/// For the repair, in its transaction: moves the recorded clock to the new `epoch`
/// (its value carries over; the row stays locked to the commit, so no check records
/// a higher one meanwhile) and sets the clock in Redis to it, so that the repaired
/// server is not behind. Returns the value.
pub(super) async fn carry_over(
    tx: &mut sqlx::PgConnection,
    conn: &mut crate::redis_conn::Conn,
    keys: &crate::keys::Keys,
    epoch: i64,
) -> Result<i64> {
    let value: i64 = sqlx::query_scalar(
        "INSERT INTO redis_clocks (namespace, epoch, clock) VALUES ($1, $2, 0)
         ON CONFLICT (namespace) DO UPDATE SET epoch = EXCLUDED.epoch
         RETURNING clock",
    )
    .bind(keys.namespace())
    .bind(epoch)
    .fetch_one(&mut *tx)
    .await
    .context("moving the Redis clock to the new epoch")?;
    let set: Value = redis::cmd("SET")
        .arg(keys.clock())
        .arg(value)
        .query_async(conn)
        .await
        .context("setting the Redis clock")?;
    if !matches!(set, Value::Okay) {
        bail!("setting the Redis clock: {set:?}");
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tick_reads_advanced_and_behind() {
        let reply = |a: i64, v: i64| Value::Array(vec![Value::Int(a), Value::Int(v)]);
        assert_eq!(
            read_tick(&reply(1, 8)).unwrap(),
            Tick {
                advanced: true,
                value: 8
            }
        );
        assert!(!read_tick(&reply(0, 3)).unwrap().advanced);
        let readonly = redis::parse_redis_value(b"-READONLY You can't write against a read only replica.\r\n").unwrap();
        assert!(read_tick(&readonly).is_err());
    }
}
