//! How the handle and the HTTP edge judge a Redis error. Two judgements:
//!
//! - [`breaks_connection`]: this connection may not be talking to a writable
//!   master that we know (the connection is gone, or the server answered as a
//!   replica, a server loading its data, or a cluster whose slots moved or are not
//!   served). The handle drops the connection, so that the next caller connects
//!   anew and checks who answers (see the module above).
//! - [`is_transient`]: a state of Redis that passes, worth a retry, answered 503
//!   `unavailable` with `Retry-After` by the order path and the HTTP edge, never
//!   500. Everything that breaks the connection, and besides a server that is the
//!   right one but cannot take a write now: out of memory (`OOM`, `maxmemory` with
//!   `noeviction`), too few replicas (`NOREPLICAS`, `min-replicas-to-write`), busy
//!   running a script (`BUSY`), or unable to persist (`MISCONF`). Those say nothing
//!   about which server answers, so the connection is kept: dropping it would only
//!   cost every caller a new connection and identity read while the state lasts.
//!
//! redis-rs gives `OOM`, `NOREPLICAS`, `BUSY` and `MISCONF` no kind of their own
//! (`ErrorKind::Extension`, the code as a string), and a script's `redis.call`
//! that meets one fails the script with the same code (Redis 7 keeps it:
//! `OOM command not allowed … script: …`). A pipeline's or a transaction's error
//! carries several server errors, each looked at.
//!
//! redis-rs hands some of them back as *values*, not errors: a multiplexed
//! connection returns a command's server error as `Value::ServerError` (it becomes
//! an error only when the caller converts the reply), and a pipeline's as one of
//! its values. So the handle inspects replies as well as errors.
use redis::{ErrorKind, RedisError, ServerError, ServerErrorKind, Value};

/// Errors after which this connection may not be talking to a writable master
/// that we know: the connection is gone, or the server answered as a replica, a
/// server loading its data, or a cluster whose slots moved or are not served.
pub fn breaks_connection(e: &RedisError) -> bool {
    unreachable(e)
        || matches!(e.kind(), ErrorKind::Server(kind) if not_a_usable_master(kind))
        || server_errors(e).iter().any(refuses)
}

/// The connection broke under the command (closed, reset, a broken pipe): the
/// server may be up again behind a new one. Not a refusal (nothing listens) nor a
/// timeout (the server may be busy): a retry on a new connection would not help.
pub fn connection_lost(e: &RedisError) -> bool {
    (e.is_io_error() || e.is_connection_dropped()) && !e.is_connection_refusal() && !e.is_timeout()
}

/// A state of Redis that passes: everything that breaks the connection, and a
/// server that cannot take a write for now (see the module's doc). Never a 500.
pub fn is_transient(e: &RedisError) -> bool {
    breaks_connection(e) || server_errors(e).iter().any(|s| PASSING.contains(&s.code()))
}

/// No answer from the server: the connection is gone, refused or timed out, or
/// the cluster client has no connection to the node.
pub(super) fn unreachable(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || matches!(e.kind(), ErrorKind::ClusterConnectionNotFound)
}

/// Codes of a server that is the right one but cannot take a write now.
const PASSING: [&str; 4] = ["OOM", "NOREPLICAS", "BUSY", "MISCONF"];

/// The server errors an error carries: its own, or each command's of a pipeline,
/// or the refusals inside a transaction the server aborted (`EXECABORT`, e.g. a
/// `MOVED` or an `OOM` met by a command queued in `MULTI`).
fn server_errors(e: &RedisError) -> Vec<ServerError> {
    e.clone()
        .into_server_errors()
        .map(|errs| errs.iter().map(|(_, s)| s.clone()).collect())
        .unwrap_or_default()
}

/// Server error kinds that say the server cannot take this write now.
fn not_a_usable_master(kind: ServerErrorKind) -> bool {
    matches!(
        kind,
        ServerErrorKind::ReadOnly
            | ServerErrorKind::MasterDown
            | ServerErrorKind::BusyLoading
            // A cluster whose slots moved (a failover, a reshard) or are not all
            // served: the next caller connects anew and reads the masters' identity.
            | ServerErrorKind::Moved
            | ServerErrorKind::Ask
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::TryAgain
    )
}

/// Codes redis-rs gives no kind of their own that say the server stopped being a
/// master under the command: a master that becomes a replica (a partition healed
/// on its minority side, a manual failover) unblocks the `WAIT` it was holding
/// with `UNBLOCKED force unblock from blocking operation, instance state changed
/// (master -> replica?)`.
const NO_LONGER_A_MASTER: [&str; 1] = ["UNBLOCKED"];

fn refuses(e: &ServerError) -> bool {
    e.kind().is_some_and(not_a_usable_master) || NO_LONGER_A_MASTER.contains(&e.code())
}

/// Whether a reply (or, for a pipeline or a transaction, any reply in it) is
/// one of those server errors.
pub(super) fn reply_refuses(v: &Value) -> bool {
    match v {
        Value::ServerError(e) => refuses(e),
        Value::Array(items) => items.iter().any(reply_refuses),
        _ => false,
    }
}

/// A node's `INFO replication`: `Ok` for a master; a READONLY error otherwise, so
/// that nobody writes through a connection to a replica (its writes would fail,
/// and its reads may be stale).
pub(super) fn must_be_master(info: &str) -> Result<(), RedisError> {
    let role = info.lines().find_map(|l| l.strip_prefix("role:")).map(str::trim);
    if role == Some("master") {
        return Ok(());
    }
    Err(RedisError::from((
        ErrorKind::Server(ServerErrorKind::ReadOnly),
        "the Redis server is not a master",
        format!("role: {}", role.unwrap_or("unknown")),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_error(line: &[u8]) -> Value {
        redis::parse_redis_value(line).expect("a RESP error line")
    }

    #[test]
    fn a_replica_a_loading_server_and_a_moved_slot_are_refusals_in_replies() {
        for line in [
            &b"-READONLY You can't write against a read only replica.\r\n"[..],
            b"-MASTERDOWN Link with MASTER is down\r\n",
            b"-LOADING Redis is loading the dataset in memory\r\n",
            b"-MOVED 3999 127.0.0.1:6381\r\n",
            b"-CLUSTERDOWN The cluster is down\r\n",
        ] {
            let v = server_error(line);
            assert!(reply_refuses(&v), "{v:?}");
            assert!(reply_refuses(&Value::Array(vec![Value::Int(1), v])));
        }
        for line in [
            &b"-ERR wrong number of arguments\r\n"[..],
            b"-NOSCRIPT No matching script\r\n",
        ] {
            assert!(!reply_refuses(&server_error(line)));
        }
        assert!(!reply_refuses(&Value::Int(3)));
    }

    #[test]
    fn the_same_server_errors_break_the_connection_and_are_transient() {
        let readonly: RedisError = RedisError::from((ErrorKind::Server(ServerErrorKind::ReadOnly), "ro"));
        assert!(breaks_connection(&readonly) && is_transient(&readonly));
        let loading = RedisError::from((ErrorKind::Server(ServerErrorKind::BusyLoading), "loading"));
        assert!(breaks_connection(&loading) && is_transient(&loading));
        let moved = as_error(b"-MOVED 3999 127.0.0.1:6381\r\n");
        assert!(breaks_connection(&moved) && is_transient(&moved));
        let bug = RedisError::from((ErrorKind::Server(ServerErrorKind::ResponseError), "ERR"));
        assert!(!is_transient(&bug) && !breaks_connection(&bug));
        assert!(!is_transient(&RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "type"
        ))));
    }

    fn as_error(line: &[u8]) -> RedisError {
        match server_error(line) {
            Value::ServerError(e) => e.into(),
            other => panic!("not an error: {other:?}"),
        }
    }

    #[test]
    fn a_full_memory_too_few_replicas_or_a_busy_script_pass_and_keep_the_connection() {
        for line in [
            &b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"[..],
            // A script's redis.call that met it: Redis 7 keeps the code.
            b"-OOM command not allowed when used memory > 'maxmemory'. script: ff96, on @user_script:1.\r\n",
            b"-NOREPLICAS Not enough good replicas to write.\r\n",
            b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n",
            b"-MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.\r\n",
        ] {
            let e = as_error(line);
            assert!(is_transient(&e), "{e}");
            assert!(!breaks_connection(&e), "{e}");
            assert!(!reply_refuses(&server_error(line)), "{e}");
        }
        // Codes that merely start alike are not the same state.
        assert!(!is_transient(&as_error(
            b"-BUSYKEY Target key name already exists.\r\n"
        )));
        assert!(!is_transient(&as_error(b"-NOSCRIPT No matching script.\r\n")));
    }

    #[test]
    fn a_wait_unblocked_by_a_master_turned_replica_breaks_the_connection_and_passes() {
        let line = b"-UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)\r\n";
        let e = as_error(line);
        assert!(breaks_connection(&e) && is_transient(&e), "{e}");
        // As the pipeline of reserve.lua + WAIT answers it.
        assert!(reply_refuses(&Value::Array(vec![Value::Int(1), server_error(line)])));
    }

    #[test]
    fn only_a_master_is_a_usable_server() {
        assert!(must_be_master("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n").is_ok());
        let e = must_be_master("# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\n").unwrap_err();
        assert!(breaks_connection(&e) && is_transient(&e), "{e}");
    }
}
