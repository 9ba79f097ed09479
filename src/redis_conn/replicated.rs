//! A script and `WAIT` in one pipeline, for writes acknowledged only once
//! replicas hold them (`SECKILL_REDIS_WAIT_REPLICAS`): `WAIT` counts the replicas
//! that acknowledged the connection's writes so far, so it must follow the script
//! on the same connection (on a cluster, the pipeline keeps a keyless command on
//! the node of the command before it).
use super::conn::Conn;
use redis::{RedisResult, Script, Value};
use std::time::Duration;

/// `script` on `keys` with `args` (EVALSHA, loading the script once if the server
/// does not know it), then a write of `fence` (a key of the same slot), then
/// `WAIT replicas deadline`: the script's reply, and how many replicas hold
/// everything the master held when the script ran. The fence makes `WAIT` cover
/// the writes before the script too (`WAIT` waits for the connection's last
/// write): a retry that finds its step done, and writes nothing, learns whether
/// the replicas hold that step.
pub async fn script_and_wait(
    conn: &mut Conn,
    script: &Script,
    keys: &[String],
    args: &[Vec<u8>],
    fence: &str,
    replicas: u32,
    deadline: Duration,
) -> RedisResult<(Value, i64)> {
    let pipeline = || {
        let mut eval = redis::cmd("EVALSHA");
        eval.arg(script.get_hash()).arg(keys.len()).arg(keys).arg(args);
        let mut pipe = redis::pipe();
        pipe.add_command(eval)
            .cmd("SET")
            .arg(fence)
            .arg(1)
            .arg("PX")
            .arg(600_000)
            .ignore()
            .cmd("WAIT")
            .arg(replicas)
            .arg(deadline.as_millis().max(1) as u64);
        pipe
    };
    match pipeline().query_async(conn).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            let _: String = script.prepare_invoke().load_async(conn).await?;
            pipeline().query_async(conn).await
        }
        other => other,
    }
}
