//! What Redis says of its persistence, and what an acknowledged order risks.

/// How Redis keeps what it acknowledged, as far as it tells.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Durability {
    /// `appendonly` and `appendfsync` as Redis reports them (`unknown` if CONFIG is
    /// not allowed).
    pub aof: String,
    pub replicas: i64,
    /// Whether an acknowledged order survives a crash of the Redis server.
    pub safe: bool,
    pub at_risk: String,
}

/// Reads what Redis says of its persistence; what an acknowledged order risks.
pub async fn durability(conn: &mut crate::redis_conn::Conn) -> Durability {
    let get = |conn: &mut crate::redis_conn::Conn, name: &'static str| {
        let mut conn = conn.clone();
        async move {
            let r: redis::RedisResult<Vec<String>> =
                redis::cmd("CONFIG").arg("GET").arg(name).query_async(&mut conn).await;
            r.ok().and_then(|v| v.get(1).cloned())
        }
    };
    let aof = get(conn, "appendonly").await;
    let fsync = get(conn, "appendfsync").await;
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(conn)
        .await
        .unwrap_or_default();
    let replicas = info
        .lines()
        .find_map(|l| l.strip_prefix("connected_slaves:"))
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let (aof_text, safe, at_risk) = match (aof.as_deref(), fsync.as_deref()) {
        (Some("yes"), Some("always")) => ("appendonly yes, appendfsync always".to_owned(), true, String::new()),
        (Some("yes"), Some(f)) => (
            format!("appendonly yes, appendfsync {f}"),
            false,
            "a Redis crash loses up to a second of acknowledged orders not yet relayed; \
             the service repairs the sales and sells on"
                .to_owned(),
        ),
        (Some(a), _) => (
            format!("appendonly {a}"),
            false,
            "a Redis restart loses every acknowledged order not yet relayed to RabbitMQ; \
             the service repairs the sales from Postgres and sells on"
                .to_owned(),
        ),
        _ => (
            "unknown (CONFIG GET refused)".to_owned(),
            false,
            "unknown: check that Redis runs with appendfsync always".to_owned(),
        ),
    };
    Durability {
        aof: aof_text,
        replicas,
        safe,
        at_risk,
    }
}
