//! Which hash slot a command is for (its first key), and a pipeline on a cluster
//! sent as one sub-pipeline per slot.
use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisResult, Value};

/// The first key of the commands we send: the first argument, or for scripts the
/// first of their keys, for stream reads the first stream, for `XGROUP` the key
/// after the subcommand; none for commands that take no key.
pub(super) fn first_key(cmd: &Cmd) -> Option<&[u8]> {
    let mut args = cmd.args_iter().filter_map(|a| match a {
        redis::Arg::Simple(b) => Some(b),
        _ => None,
    });
    let name = args.next()?.to_ascii_uppercase();
    match name.as_slice() {
        b"INFO" | b"WAIT" | b"PING" | b"TIME" | b"CLUSTER" | b"SCRIPT" | b"PUBLISH" | b"CONFIG" | b"CLIENT" => None,
        b"XREADGROUP" | b"XREAD" => args.skip_while(|a| !a.eq_ignore_ascii_case(b"STREAMS")).nth(1),
        b"XGROUP" | b"XINFO" => args.nth(1),
        b"EVAL" | b"EVALSHA" => {
            let _script = args.next()?;
            let numkeys: usize = std::str::from_utf8(args.next()?).ok()?.parse().ok()?;
            if numkeys == 0 {
                None
            } else {
                args.next()
            }
        }
        _ => args.next(),
    }
}

/// A pipeline on a cluster, sent as one sub-pipeline per hash slot (concurrently),
/// its replies put back in the pipeline's order. redis-rs refuses a pipeline whose
/// keys span slots; ours only do for reads that need no atomicity (a sale's keys
/// share one slot, and every script and transaction keeps to one).
pub(super) async fn split_by_slot(c: &mut ClusterConnection, pipeline: &Pipeline) -> RedisResult<Vec<Value>> {
    let mut groups: Vec<(Option<u16>, Vec<usize>, Pipeline)> = Vec::new();
    let mut previous: Option<u16> = None;
    for (i, cmd) in pipeline.cmd_iter().enumerate() {
        // A command without a key (WAIT) rides with the command before it, on
        // that command's node and connection.
        let slot = first_key(cmd).map(crate::keys::slot).or(previous);
        previous = slot;
        match groups.iter_mut().find(|g| g.0 == slot) {
            Some(g) => {
                g.1.push(i);
                g.2.add_command(cmd.clone());
            }
            None => {
                let mut p = redis::pipe();
                p.add_command(cmd.clone());
                groups.push((slot, vec![i], p));
            }
        }
    }
    if groups.len() == 1 {
        return c.req_packed_commands(pipeline, 0, pipeline.len()).await;
    }
    let replies = futures::future::try_join_all(groups.iter().map(|(_, _, p)| {
        let mut c = c.clone();
        async move { c.req_packed_commands(p, 0, p.len()).await }
    }))
    .await?;
    let mut out = vec![Value::Nil; pipeline.len()];
    for ((_, indexes, _), values) in groups.iter().zip(replies) {
        for (i, v) in indexes.iter().zip(values) {
            out[*i] = v;
        }
    }
    Ok(out)
}
