//! Spawns the real application in-process on port 0 against the real services,
//! each test in its own namespace: a database, a Redis key prefix and RabbitMQ
//! names of its own, removed when the test ends (also when it panics).
use reqwest::StatusCode;
use seckill::app::{Application, Mode, Options};
use seckill::broker::Broker;
use seckill::config::Settings;
use seckill::http::auth::{JwtKeys, Role};
use seckill::keys::Keys;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant};

pub const SECRET: &str = "integration-test-secret-0123456789";

fn admin_db_url() -> String {
    std::env::var("TEST_ADMIN_DATABASE_URL").unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/postgres".into())
}

/// The per-test resources; dropping it removes them.
pub struct Namespace {
    pub name: String,
    pub db: String,
    pub vars: HashMap<String, String>,
}

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
        let base = admin_db_url();
        let db_url = format!("{}/{db}", &base[..base.rfind('/').unwrap()]);
        let vars = HashMap::from([
            ("SECKILL_HTTP_ADDR".to_owned(), "127.0.0.1:0".to_owned()),
            ("DATABASE_URL".to_owned(), db_url),
            ("SECKILL_NAMESPACE".to_owned(), name.clone()),
            ("SECKILL_JWT_SECRET".to_owned(), SECRET.to_owned()),
            ("SECKILL_DB_MAX_CONNECTIONS".to_owned(), "4".to_owned()),
            ("SECKILL_RATE_LIMIT_PER_USER".to_owned(), "0".to_owned()),
            ("SECKILL_RATE_LIMIT_PER_IP".to_owned(), "0".to_owned()),
            ("SECKILL_MAX_IN_FLIGHT".to_owned(), "0".to_owned()),
        ]);
        Self { name, db, vars }
    }

    pub fn settings(&self, overrides: &[(&str, &str)]) -> Settings {
        let mut vars = self.vars.clone();
        for (k, v) in overrides {
            vars.insert((*k).to_owned(), (*v).to_owned());
        }
        Settings::from_map(&vars).expect("test settings")
    }

    pub fn keys(&self) -> Keys {
        Keys::new(&self.name)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let (name, db) = (self.name.clone(), self.db.clone());
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
                if let Ok(client) = redis::Client::open("redis://127.0.0.1:6379") {
                    if let Ok(mut conn) = client.get_multiplexed_async_connection().await {
                        let keys: Vec<String> = redis::cmd("KEYS")
                            .arg(format!("{name}:*"))
                            .query_async(&mut conn)
                            .await
                            .unwrap_or_default();
                        if !keys.is_empty() {
                            let _: Result<(), _> = redis::cmd("DEL").arg(keys).query_async(&mut conn).await;
                        }
                    }
                }
                let broker = Broker::new(
                    "amqp://guest:guest@127.0.0.1:5672/%2f",
                    Keys::new(&name),
                    Duration::from_secs(5),
                    5,
                );
                let _ = broker.delete_topology().await;
            });
        });
        let _ = done.join();
    }
}

pub struct TestApp {
    pub app: Option<Application>,
    pub addr: String,
    pub client: reqwest::Client,
    pub jwt: JwtKeys,
}

impl TestApp {
    pub async fn spawn(ns: &Namespace) -> Self {
        Self::spawn_with(ns, &[], Options::default(), Mode::All).await
    }

    pub async fn spawn_with(ns: &Namespace, overrides: &[(&str, &str)], opts: Options, mode: Mode) -> Self {
        let settings = ns.settings(overrides);
        let app = Application::build_with(settings.clone(), mode, opts)
            .await
            .expect("build the application");
        let addr = format!("http://127.0.0.1:{}", app.port().unwrap_or(0));
        Self {
            app: Some(app),
            addr,
            client: reqwest::Client::new(),
            jwt: JwtKeys::new(settings.jwt_secret.expose()),
        }
    }

    /// An instance that serves the API only: no relay, no worker (accepted orders
    /// stay in the outbox unless another instance relays them).
    pub async fn spawn_api_only(ns: &Namespace, overrides: &[(&str, &str)]) -> Self {
        let opts = Options {
            relay: false,
            worker: false,
            ..Default::default()
        };
        Self::spawn_with(ns, overrides, opts, Mode::Serve).await
    }

    pub fn app(&self) -> &Application {
        self.app.as_ref().expect("application running")
    }

    pub fn admin(&self) -> String {
        self.jwt.mint(1, Role::Admin, 600)
    }

    pub fn shopper(&self, user: i64) -> String {
        self.jwt.mint(user, Role::Shopper, 600)
    }

    pub fn service(&self) -> String {
        self.jwt.mint(2, Role::Service, 600)
    }

    pub async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self.client.request(method, format!("{}{path}", self.addr));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request sent");
        let status = resp.status();
        let body = resp.json().await.unwrap_or(Value::Null);
        (status, body)
    }

    pub async fn get(&self, path: &str, token: Option<&str>) -> (StatusCode, Value) {
        self.request(reqwest::Method::GET, path, token, None).await
    }

    pub async fn post(&self, path: &str, token: Option<&str>, body: Value) -> (StatusCode, Value) {
        self.request(reqwest::Method::POST, path, token, Some(body)).await
    }

    /// A flash sale open from a second ago for an hour.
    pub async fn flash_sale(&self, stock: i64) -> i64 {
        let now = chrono::Utc::now();
        self.flash_sale_between(
            stock,
            now - chrono::Duration::seconds(1),
            now + chrono::Duration::hours(1),
        )
        .await
    }

    pub async fn flash_sale_between(
        &self,
        stock: i64,
        begin: chrono::DateTime<chrono::Utc>,
        end: chrono::DateTime<chrono::Utc>,
    ) -> i64 {
        let (status, body) = self
            .post(
                "/api/v1/admin/vouchers",
                Some(&self.admin()),
                json!({"shop_id": "7", "title": "flash", "pay_value": 100, "actual_value": 1000, "stock": stock,
                       "begin_at": begin.to_rfc3339(), "end_at": end.to_rfc3339()}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body["id"].as_str().unwrap().parse().unwrap()
    }

    pub async fn order(&self, voucher: i64, user: i64) -> (StatusCode, Value) {
        self.post(
            &format!("/api/v1/vouchers/{voucher}/orders"),
            Some(&self.shopper(user)),
            json!({}),
        )
        .await
    }

    pub async fn stats(&self, voucher: i64) -> Value {
        let (status, body) = self
            .get(&format!("/api/v1/admin/vouchers/{voucher}"), Some(&self.admin()))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["stats"].clone()
    }

    pub fn pg(&self) -> &sqlx::PgPool {
        &self.app().state().pg
    }

    /// A Redis connection of the test's own (not the application's).
    pub async fn redis(&self) -> redis::aio::MultiplexedConnection {
        let client = redis::Client::open("redis://127.0.0.1:6379").unwrap();
        client.get_multiplexed_async_connection().await.expect("redis")
    }

    pub async fn shutdown(mut self) {
        if let Some(app) = self.app.take() {
            app.shutdown().await;
        }
    }

    /// Stops everything at once, as a crash would.
    pub async fn crash(mut self) {
        if let Some(app) = self.app.take() {
            app.abort().await;
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(app) = &self.app {
            app.stop_token().cancel();
        }
    }
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

/// The real binary (`seckill all`) in the namespace; returns it and its port.
pub async fn spawn_binary(ns: &Namespace, extra: &[(&str, &str)]) -> (std::process::Child, u16) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_seckill"))
        .arg("all")
        .envs(ns.vars.iter())
        .envs(extra.iter().copied())
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start seckill");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    // Keep reading (and discarding) its log so that the pipe never fills up.
    std::thread::spawn(move || {
        use std::io::BufRead;
        let mut tx = Some(tx);
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.split("addr=127.0.0.1:").nth(1) {
                let port = rest
                    .split(|c: char| !c.is_ascii_digit())
                    .next()
                    .and_then(|p| p.parse::<u16>().ok());
                if let (Some(tx), Some(port)) = (tx.take(), port) {
                    let _ = tx.send(port);
                }
            }
        }
    });
    let port = tokio::time::timeout(Duration::from_secs(30), rx)
        .await
        .expect("the process logs its port")
        .unwrap();
    (child, port)
}

/// Whether the tests run as root: needed to start RabbitMQ and Postgres servers of
/// their own, which run as their own users (CI runs as root).
pub fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout == b"0\n")
}
