//! A server's `run_id`, read from its `INFO server`: which server process answers
//! (see the module above).
use redis::{ErrorKind, RedisError, ServerErrorKind};

pub(super) fn run_id_of(info: &str) -> Result<String, RedisError> {
    info.lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .map(|s| s.trim().to_owned())
        .ok_or_else(|| {
            RedisError::from((
                ErrorKind::Server(ServerErrorKind::ResponseError),
                "INFO server has no run_id",
            ))
        })
}
