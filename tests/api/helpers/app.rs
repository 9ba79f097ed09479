//! An instance of the application under test, and requests to it.
use super::{init_test_log, Namespace};
use reqwest::StatusCode;
use seckill::app::{Application, Mode, Options};
use seckill::clock::Clock;
use seckill::config::Settings;
use seckill::http::auth::{JwtKeys, Role};
use serde_json::{json, Value};
use std::time::Duration;

/// A running instance and a client for it. `shutdown` stops it gracefully, `crash`
/// at once; dropping it stops it too.
///
/// However it ends (`shutdown`, `crash`, dropped), an instance whose test did not
/// say it forces incidents ([`Builder::forces_incidents`]) fails the test if its
/// worker or relay counted any (`seckill_worker_incidents_total`, every kind: an
/// order stored `failed`, an id or number that collided, a message
/// dead-lettered, an order that came too late, an outbox entry it could not
/// read). These are the only signals of what Postgres's unique indexes hide.
pub struct TestApp {
    pub app: Option<Application>,
    pub addr: String,
    pub client: reqwest::Client,
    pub jwt: JwtKeys,
    /// The kinds of incident the test forces on purpose (and reads itself).
    forces_incidents: &'static [&'static str],
}

/// What an instance runs and with which settings; by default everything (`seckill
/// all`), the namespace's settings and the system clock. [`Builder::spawn`] starts it.
#[must_use = "the instance starts with .spawn().await"]
pub struct Builder<'a> {
    ns: &'a Namespace,
    env: Vec<(String, String)>,
    mode: Mode,
    options: Options,
    forces_incidents: &'static [&'static str],
}

impl Builder<'_> {
    /// The test forces incidents of these kinds on this instance on purpose (and
    /// asserts them itself): they do not fail it when it ends; any other kind does.
    pub fn forces_incidents(mut self, kinds: &'static [&'static str]) -> Self {
        self.forces_incidents = kinds;
        self
    }

    /// A setting of this instance's (over the namespace's), e.g. `SECKILL_ID_BLOCK`
    /// or a `REDIS_URL` of a server of the test's own (one node, unless the test
    /// also sets `SECKILL_REDIS_CLUSTER`).
    pub fn env(mut self, key: &str, value: impl Into<String>) -> Self {
        if key == "REDIS_URL" {
            self.env.push(("SECKILL_REDIS_CLUSTER".to_owned(), "false".to_owned()));
        }
        self.env.push((key.to_owned(), value.into()));
        self
    }

    /// Which process to be: `All` (the default), `Serve` (API and relay) or `Worker`.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Whether the outbox relay runs (default yes). Without one, accepted orders stay
    /// in the outbox, pending, until an instance with a relay starts.
    pub fn relay(mut self, on: bool) -> Self {
        self.options.relay = on;
        self
    }

    /// Whether the order worker runs where the mode has one (default yes).
    pub fn worker(mut self, on: bool) -> Self {
        self.options.worker = on;
        self
    }

    /// The clock the instance reads (default the system's), e.g. `Clock::manual`.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.options.clock = clock;
        self
    }

    /// The API alone: `mode(Mode::Serve).relay(false).worker(false)`. Accepted orders
    /// stay in the outbox unless another instance relays them.
    pub fn api_only(self) -> Self {
        self.mode(Mode::Serve).relay(false).worker(false)
    }

    pub async fn spawn(self) -> TestApp {
        init_test_log();
        let mut vars = self.ns.vars.clone();
        vars.extend(self.env);
        let settings = Settings::from_map(&vars).expect("test settings");
        let app = Application::build_with(settings.clone(), self.mode, self.options)
            .await
            .expect("build the application");
        let addr = format!("http://127.0.0.1:{}", app.port().unwrap_or(0));
        TestApp {
            app: Some(app),
            addr,
            // Idle connections are dropped after 2 s, before the server's keep-alive
            // (actix's 5 s) closes them: a request sent on a connection the server
            // is closing at that moment fails (hyper's IncompleteMessage), which
            // would be the client's race, not an answer of the service.
            client: reqwest::Client::builder()
                .pool_idle_timeout(std::time::Duration::from_secs(2))
                .build()
                .expect("a reqwest client"),
            jwt: JwtKeys::from_settings(&settings.auth),
            forces_incidents: self.forces_incidents,
        }
    }
}

impl TestApp {
    /// An instance running everything (`seckill all`: API, relay, worker) with the
    /// namespace's settings: `TestApp::builder(ns).spawn()`.
    pub async fn spawn(ns: &Namespace) -> Self {
        Self::builder(ns).spawn().await
    }

    /// An instance to configure before it starts, e.g.
    /// `TestApp::builder(&ns).env("SECKILL_ID_BLOCK", "7").mode(Mode::Serve).spawn().await`.
    pub fn builder(ns: &Namespace) -> Builder<'_> {
        Builder {
            ns,
            env: Vec::new(),
            mode: Mode::All,
            options: Options::default(),
            forces_incidents: &[],
        }
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

    /// A flash sale open from a second ago for an hour, over `shards` shards.
    pub async fn sharded_sale(&self, stock: i64, shards: u32) -> i64 {
        let now = chrono::Utc::now();
        let (status, body) = self
            .post(
                "/api/v1/admin/vouchers",
                Some(&self.admin()),
                json!({"shop_id": "7", "title": "flash", "pay_value": 100, "actual_value": 1000, "stock": stock,
                       "stock_shards": shards,
                       "begin_at": (now - chrono::Duration::seconds(1)).to_rfc3339(),
                       "end_at": (now + chrono::Duration::hours(1)).to_rfc3339()}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(body["stock_shards"], shards, "{body}");
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

    /// The value of one series of this instance's `/metrics` (0 if absent).
    /// (Rendered now, from the instance's registry: `GET /metrics` serves a page up
    /// to a second old.)
    pub async fn metric(&self, series: &str) -> f64 {
        let text = self.metrics_text();
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map_or(0.0, |n| n.trim().parse().unwrap())
    }

    /// This instance's metrics page, rendered now (`GET /metrics` serves one up to
    /// a second old).
    pub fn metrics_text(&self) -> String {
        self.app().state().metrics.render()
    }

    pub fn pg(&self) -> &sqlx::PgPool {
        &self.app().state().handles.pg
    }

    /// A Redis connection of the test's own (not the application's) to the server
    /// the instance uses.
    pub async fn redis(&self) -> seckill::redis_conn::Conn {
        let s = &self.app().state().settings;
        seckill::redis_conn::Redis::new(
            s.services.redis_url.expose(),
            s.services.redis_cluster,
            Duration::from_secs(5),
        )
        .unwrap()
        .conn()
        .await
        .expect("redis")
    }

    pub async fn shutdown(mut self) {
        if let Some(app) = self.app.take() {
            let metrics = app.state().metrics.clone();
            app.shutdown().await;
            // After the shutdown: what the worker met draining its last batch too.
            self.check(&metrics);
        }
    }

    /// Stops everything at once, as a crash would.
    pub async fn crash(mut self) {
        if let Some(app) = self.app.take() {
            let metrics = app.state().metrics.clone();
            app.abort().await;
            self.check(&metrics);
        }
    }

    /// The incidents this instance counted, by kind (every kind it counted).
    pub fn incidents(&self) -> Vec<(String, u64)> {
        match &self.app {
            Some(app) => counted(&app.state().metrics),
            None => Vec::new(),
        }
    }

    /// Fails the test on any incident of `metrics` (this instance's) of a kind it
    /// does not force.
    fn check(&self, metrics: &seckill::metrics::Metrics) {
        if std::thread::panicking() {
            return;
        }
        let unforced: Vec<(String, u64)> = counted(metrics)
            .into_iter()
            .filter(|(kind, _)| !self.forces_incidents.contains(&kind.as_str()))
            .collect();
        assert!(
            unforced.is_empty(),
            "the instance at {} counted incidents no test forced: {unforced:?} (its INCIDENT log lines name them)",
            self.addr
        );
    }
}

/// The incidents counted in `metrics`, by kind.
fn counted(metrics: &seckill::metrics::Metrics) -> Vec<(String, u64)> {
    use prometheus::core::Collector;
    metrics
        .worker_incidents
        .collect()
        .iter()
        .flat_map(|family| family.get_metric())
        .filter_map(|m| {
            let kind = m.get_label().iter().find(|l| l.name() == "kind")?.value().to_owned();
            let n = m.get_counter().get_value() as u64;
            (n > 0).then_some((kind, n))
        })
        .collect()
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(app) = &self.app {
            app.stop_token().cancel();
            self.check(&app.state().metrics.clone());
        }
    }
}
