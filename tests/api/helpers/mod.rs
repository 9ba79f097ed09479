//! The harness. Each test makes a [`Namespace`] (a database, a Redis key prefix and
//! RabbitMQ names of its own, removed when the test ends, also when it panics) and
//! starts the real application in it, in-process on port 0, with
//! [`TestApp::builder`] (`app.rs`). The services are the ones `REDIS_URL`,
//! `AMQP_URL` and `TEST_ADMIN_DATABASE_URL` name, by default the machine's own.
//! `sale.rs` drives and checks a sale: waves of shoppers, Redis epochs, the audit.
//! `pg.rs` serves the tests of Postgres's own rules.
mod app;
mod beacon;
mod pg;
mod sale;
pub mod stub_http;

pub use app::TestApp;
pub use beacon::*;
pub use pg::*;
pub use sale::*;

use seckill::broker::Broker;
use seckill::keys::Keys;
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant};

pub const SECRET: &str = "integration-test-secret-0123456789";

/// The Redis server tests share: `REDIS_URL`, by default the machine's; with
/// `TEST_REDIS_CLUSTER` set, the seed nodes it lists (a Redis Cluster, as
/// `scripts/redis_cluster.sh --urls` prints them).
pub fn redis_url() -> String {
    match cluster_seeds() {
        Some(seeds) => seeds,
        None => from_env("REDIS_URL", "redis://127.0.0.1:6379"),
    }
}

/// The seed nodes of the Redis Cluster the tests run on, if they run on one.
pub fn cluster_seeds() -> Option<String> {
    std::env::var("TEST_REDIS_CLUSTER")
        .ok()
        .filter(|v| !v.trim().is_empty())
}

/// The seed nodes of the Redis Cluster a cluster-only test needs: it fails (never
/// passes untested) unless `TEST_REDIS_CLUSTER` names a cluster that serves every
/// slot over more than one master. Cluster-only tests are `#[ignore]`d and named
/// `on_a_cluster_…`; `scripts/test.sh` runs them in its cluster pass.
pub async fn require_cluster() -> String {
    let seeds = cluster_seeds()
        .expect("a cluster-only test without a cluster: TEST_REDIS_CLUSTER=$(scripts/redis_cluster.sh --urls) runs it");
    let first = seeds.split(',').next().unwrap().trim().to_owned();
    let mut conn = redis::Client::open(first.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("TEST_REDIS_CLUSTER's {first} does not answer: {e}"));
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{first} is no cluster node: {e}"));
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.trim().to_owned())
            .unwrap_or_default()
    };
    assert_eq!(field("cluster_state"), "ok", "the cluster is not serving: {info}");
    let masters: u32 = field("cluster_size").parse().unwrap_or(0);
    assert!(masters > 1, "a cluster of {masters} master(s) proves nothing: {info}");
    seeds
}

/// A handle on the shared Redis (node or cluster) for the test's own commands.
pub fn test_redis() -> seckill::redis_conn::Redis {
    seckill::redis_conn::Redis::new(&redis_url(), cluster_seeds().is_some(), Duration::from_secs(5)).unwrap()
}

/// The RabbitMQ broker tests share: `AMQP_URL`, by default the machine's.
pub fn amqp_url() -> String {
    from_env("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
}

/// A database of the shared PostgreSQL server from which each test creates and
/// drops a database of its own: `TEST_ADMIN_DATABASE_URL`, by default the
/// machine's `postgres` database.
pub fn admin_db_url() -> String {
    from_env("TEST_ADMIN_DATABASE_URL", "postgres://root@127.0.0.1:5432/postgres")
}

fn from_env(var: &str, default: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| default.to_owned())
}

/// `url` naming the database `db` instead of its own (query parameters kept).
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let server = &base[..base.rfind('/').expect("a database URL ends with /<database>")];
    format!("{server}/{db}{query}")
}

/// The per-test resources; dropping it removes them.
pub struct Namespace {
    pub name: String,
    pub db: String,
    pub vars: HashMap<String, String>,
}

/// The `INCIDENT` log lines of the processes of their own tests run
/// (`crate::fixtures`), by namespace: a namespace that ends with any fails its
/// test (no test forces incidents in a process of its own).
pub static INCIDENT_LINES: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());

/// The threads reading those processes' logs, by namespace.
pub static LOG_READERS: std::sync::Mutex<Vec<(String, std::thread::JoinHandle<()>)>> =
    std::sync::Mutex::new(Vec::new());

impl Namespace {
    pub async fn new() -> Self {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let name = format!("t{}", &id[..12]);
        let db = format!("seckill_{name}");
        let admin = sqlx::PgPool::connect(&admin_db_url())
            .await
            .expect("connect to the admin database");
        sqlx::query(&format!("CREATE DATABASE {db}"))
            .execute(&admin)
            .await
            .expect("create test database");
        admin.close().await;
        let vars = HashMap::from([
            ("SECKILL_HTTP_ADDR".to_owned(), "127.0.0.1:0".to_owned()),
            ("DATABASE_URL".to_owned(), with_database(&admin_db_url(), &db)),
            ("REDIS_URL".to_owned(), redis_url()),
            (
                "SECKILL_REDIS_CLUSTER".to_owned(),
                cluster_seeds().is_some().to_string(),
            ),
            ("AMQP_URL".to_owned(), amqp_url()),
            ("SECKILL_NAMESPACE".to_owned(), name.clone()),
            ("SECKILL_JWT_SECRET".to_owned(), SECRET.to_owned()),
            ("SECKILL_DB_MAX_CONNECTIONS".to_owned(), "4".to_owned()),
            ("SECKILL_RATE_LIMIT_PER_USER".to_owned(), "0".to_owned()),
            ("SECKILL_RATE_LIMIT_PAY_CANCEL_PER_USER".to_owned(), "0".to_owned()),
            ("SECKILL_RATE_LIMIT_PER_IP".to_owned(), "0".to_owned()),
            ("SECKILL_MAX_IN_FLIGHT".to_owned(), "0".to_owned()),
        ]);
        Self { name, db, vars }
    }

    /// The `INCIDENT` lines this namespace's processes of their own logged so far.
    pub fn incident_lines(&self) -> Vec<String> {
        INCIDENT_LINES
            .lock()
            .unwrap()
            .iter()
            .filter(|(ns, _)| *ns == self.name)
            .map(|(_, line)| line.clone())
            .collect()
    }

    pub fn keys(&self) -> Keys {
        Keys::new(&self.name)
    }

    /// The namespace's RabbitMQ topology on the shared broker, for publishing as
    /// another process would.
    pub fn broker(&self) -> Broker {
        Broker::new(&self.vars["AMQP_URL"], self.keys(), Duration::from_secs(5), 5)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        // The log readers of this namespace's processes: a process the test
        // stopped has its last lines read first (waited for 5 s at most; one still
        // running is read up to here).
        let readers: Vec<std::thread::JoinHandle<()>> = {
            let mut all = LOG_READERS.lock().unwrap();
            let (mine, rest): (Vec<_>, Vec<_>) = all.drain(..).partition(|(ns, _)| *ns == self.name);
            *all = rest;
            mine.into_iter().map(|(_, r)| r).collect()
        };
        let until = Instant::now() + Duration::from_secs(5);
        while readers.iter().any(|r| !r.is_finished()) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        let lines = self.incident_lines();
        INCIDENT_LINES.lock().unwrap().retain(|(ns, _)| *ns != self.name);
        self.clean_up();
        if !std::thread::panicking() {
            assert!(lines.is_empty(), "processes of this test logged incidents: {lines:#?}");
        }
    }
}

impl Namespace {
    /// Removes the namespace's database, Redis keys and RabbitMQ topology.
    fn clean_up(&self) {
        let (name, db) = (self.name.clone(), self.db.clone());
        let (redis_url, amqp_url) = (self.vars["REDIS_URL"].clone(), self.vars["AMQP_URL"].clone());
        // Drop runs outside any async context we could block: clean up on a thread
        // with a runtime of its own.
        let done = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                if let Ok(admin) = sqlx::PgPool::connect(&admin_db_url()).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
                        .execute(&admin)
                        .await;
                }
                // Every node's keys (a cluster's are spread over its masters),
                // deleted one by one through a handle that routes each to its slot.
                let keys = all_keys(&redis_url, &format!("{name}:*")).await;
                if !keys.is_empty() {
                    if let Ok(mut conn) = test_redis().conn().await {
                        let mut pipe = redis::pipe();
                        for k in &keys {
                            pipe.del(k).ignore();
                        }
                        let _: Result<(), _> = pipe.query_async(&mut conn).await;
                    }
                }
                // Made here: a broker connects on the runtime it was made on.
                let broker = Broker::new(&amqp_url, Keys::new(&name), Duration::from_secs(5), 5);
                let _ = broker.delete_topology().await;
            });
        });
        let _ = done.join();
    }
}

/// The keys matching `pattern` on every node `redis_url` lists (a cluster's are
/// spread over its masters), each once.
pub async fn all_keys(redis_url: &str, pattern: &str) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    for url in redis_url.split(',') {
        if let Ok(client) = redis::Client::open(url.trim()) {
            if let Ok(mut conn) = client.get_multiplexed_async_connection().await {
                let found: Vec<String> = redis::cmd("KEYS")
                    .arg(pattern)
                    .query_async(&mut conn)
                    .await
                    .unwrap_or_default();
                keys.extend(found);
            }
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

/// Polls `check` until it returns Some or `timeout` passes.
pub async fn eventually<T, F, Fut>(timeout: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The error code of an error body.
pub fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("<no error code>")
}

/// `TEST_LOG=1` shows the application's logs (at `RUST_LOG`, default info).
pub fn init_test_log() {
    if std::env::var_os("TEST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
            .with_test_writer()
            .try_init();
    }
}
