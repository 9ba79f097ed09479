//! The fault suite's harness: a crowd of shoppers with a fault injected while their
//! requests are in flight, and the checks every scenario ends with.
use crate::helpers::*;
use reqwest::StatusCode;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The orders the crowd was told were accepted (202), and how many answers of
/// each status it got (0: no answer at all).
#[derive(Default)]
pub struct Tally {
    pub acknowledged: HashSet<i64>,
    /// How many of them were sent after the fault had landed.
    pub accepted_after_fault: usize,
    pub statuses: std::collections::BTreeMap<u16, usize>,
    /// What was in flight when the fault landed (`None` for a crowd without one).
    pub landed: Option<InFlight>,
    /// Each shopper's answer (0: none).
    pub answers: Vec<(i64, u16)>,
    /// The order id of every 202, repeats kept: two answers naming one id show
    /// an id issued twice.
    pub ids: Vec<i64>,
}

/// The work in flight at the instant a fault lands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InFlight {
    /// Requests sent and not yet answered.
    pub requests: usize,
    /// Orders acknowledged (202) and not yet in Postgres.
    pub unpersisted: usize,
}

/// Handed to a fault: [`Landing::lands`] is called right before the step that
/// lands it (the kill, the `DEL`, the `ALTER DATABASE`), and reads what the crowd
/// has in flight at that instant. Everything slow that prepares the fault comes
/// before the crowd, so that the fault lands while requests are going out.
#[derive(Clone)]
pub struct Landing {
    pg: sqlx::PgPool,
    voucher: i64,
    sent: Arc<AtomicUsize>,
    answered: Arc<AtomicUsize>,
    acknowledged: Arc<Mutex<Vec<i64>>>,
    seen: Arc<Mutex<Option<InFlight>>>,
}

impl Landing {
    /// For a crowd of `voucher`'s shoppers of the test's own: it calls
    /// [`Landing::sending`] before each request and [`Landing::answered`] after.
    pub fn new(pg: &sqlx::PgPool, voucher: i64) -> Self {
        Self {
            pg: pg.clone(),
            voucher,
            sent: Default::default(),
            answered: Default::default(),
            acknowledged: Default::default(),
            seen: Default::default(),
        }
    }

    /// A request is about to be sent.
    pub fn sending(&self) {
        self.sent.fetch_add(1, SeqCst);
    }

    /// A request was answered: with the order id of a 202, if it was one. How
    /// many are answered now.
    pub fn answered(&self, acknowledged: Option<i64>) -> usize {
        // Acknowledged before it counts as answered: a probe never sees an
        // order neither in flight nor acknowledged.
        if let Some(id) = acknowledged {
            self.acknowledged.lock().unwrap().push(id);
        }
        self.answered.fetch_add(1, SeqCst) + 1
    }

    /// What is in flight as the fault lands (the crowd records the first reading,
    /// if called again; each call returns its own), which the crowd fails unless
    /// both counts are above zero:
    /// read ([`Landing::now`]) until requests and unpersisted acknowledged orders
    /// are both in flight (a loop's requests may not have gone out yet, a crowd
    /// may pause between requests), 5 s at most, when the last reading is taken
    /// (and the crowd's assertion fails). Timing decides only how long this
    /// waits; the fault's step follows at once.
    pub async fn lands(&self) -> InFlight {
        let until = std::time::Instant::now() + Duration::from_secs(5);
        let landed = loop {
            let seen = self.now().await;
            if (seen.requests > 0 && seen.unpersisted > 0) || std::time::Instant::now() > until {
                break seen;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        // The crowd keeps the first; each caller gets its own reading (a test
        // that lands several faults checks each).
        self.seen.lock().unwrap().get_or_insert(landed);
        landed
    }

    /// What is in flight now: the orders acknowledged and not in Postgres (read
    /// from Postgres now: before a fault, where the fault is Postgres itself,
    /// just before it), then the requests sent and not answered.
    pub async fn now(&self) -> InFlight {
        let acknowledged = self.acknowledged.lock().unwrap().clone();
        let stored: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM voucher_orders WHERE voucher_id = $1 AND (id = ANY($2) OR issued_id = ANY($2))",
        )
        .bind(self.voucher)
        .bind(&acknowledged)
        .fetch_one(&self.pg)
        .await
        .expect("the acknowledged orders in Postgres, as the fault lands");
        // Answered first: a request answered between the two reads is then
        // counted as in flight, never as less than none.
        let answered = self.answered.load(SeqCst);
        let requests = self.sent.load(SeqCst) - answered;
        InFlight {
            requests,
            unpersisted: acknowledged.len().saturating_sub(stored as usize),
        }
    }
}

/// Fires one request per shopper at `base`, with the fault (`during`) injected in
/// the middle, by construction rather than by timing: the first quarter goes
/// out at once, 32 at a time; the fault starts when all of them are answered;
/// the second quarter is released at that instant, at most 4 at a time, and
/// while the fault is injected four shoppers of the first quarter at a time
/// order again (answered `already_ordered`, or accepted if their first try was
/// not), so that requests are in flight however long the injection takes; the
/// second half waits until the fault has landed (`during` returned). The fault
/// calls [`Landing::lands`] right before the step that lands it, and the crowd
/// fails unless requests were in flight then (sent, not answered) and
/// acknowledged orders were not yet in Postgres (`pg`'s database): a fault that
/// lands on an idle system proves nothing. Returns the acknowledged order ids.
pub async fn crowd<F, Fut>(
    base: &str,
    jwt: &seckill::http::auth::JwtKeys,
    pg: &sqlx::PgPool,
    voucher: i64,
    shoppers: std::ops::Range<i64>,
    during: F,
) -> Tally
where
    F: FnOnce(Landing) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut tally = send(base, jwt, pg, voucher, shoppers, Some(during)).await;
    let landed = tally.landed.take();
    let landed = landed.expect("the fault never called Landing::lands before it landed");
    println!("crowd: at the fault's landing {landed:?}");
    assert_in_flight(&landed);
    tally.landed = Some(landed);
    tally
}

/// Fails unless work was in flight when a fault landed: requests sent and not
/// answered, and acknowledged orders not yet in Postgres.
pub fn assert_in_flight(landed: &InFlight) {
    assert!(
        landed.requests > 0,
        "the fault landed with no request in flight: {landed:?}"
    );
    assert!(
        landed.unpersisted > 0,
        "the fault landed with every acknowledged order already in Postgres: {landed:?}"
    );
}

/// How many shoppers each lane of a [`Steady`] stream has (then it stops).
const SHOPPERS_PER_LANE: i64 = 3_000;

/// One answer of a [`Steady`] stream.
#[derive(Clone, Copy, Debug)]
pub struct Answer {
    pub sent: std::time::Instant,
    /// 0: no answer.
    pub status: u16,
    /// The order id of a 202.
    pub id: Option<i64>,
}

/// A steady stream of new shoppers ordering from one sale, for a fault test that
/// is not shaped like a crowd (a fault that lasts while the test probes the
/// service, a stream it measures): `lanes` loops, each a new shopper at a time
/// (users `first`, `first + 1`, … dealt round the lanes) with `pause` between
/// two orders, until [`Steady::stop`]. The fault calls [`Steady::lands`] right
/// before the step that lands it: it fails unless requests and unpersisted
/// acknowledged orders were in flight then, as [`crowd`]'s.
pub struct Steady {
    landing: Landing,
    stop: Arc<std::sync::atomic::AtomicBool>,
    lanes: Vec<tokio::task::JoinHandle<Vec<Answer>>>,
}

impl Steady {
    pub fn start(
        base: &str,
        jwt: &seckill::http::auth::JwtKeys,
        pg: &sqlx::PgPool,
        voucher: i64,
        first: i64,
        lanes: i64,
        pause: Duration,
    ) -> Self {
        let landing = Landing::new(pg, voucher);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let client = shoppers_client();
        let url = format!("{base}/api/v1/vouchers/{voucher}/orders");
        let lanes = (0..lanes)
            .map(|lane| {
                // Minted here (the keys stay with the test): enough for a minute of
                // the fastest stream a test runs.
                let tokens: Vec<(i64, String)> = (0..SHOPPERS_PER_LANE)
                    .map(|k| first + lane + k * lanes)
                    .map(|u| (u, jwt.mint(u, seckill::http::auth::Role::Shopper, 600)))
                    .collect();
                let (client, url, landing, stop) = (client.clone(), url.clone(), landing.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut answers = Vec::new();
                    for (_, token) in tokens {
                        if stop.load(SeqCst) {
                            break;
                        }
                        let sent = std::time::Instant::now();
                        landing.sending();
                        let (status, id) = order(&client, &url, &token).await;
                        landing.answered(id);
                        answers.push(Answer { sent, status, id });
                        tokio::time::sleep(pause).await;
                    }
                    answers
                })
            })
            .collect();
        Self { landing, stop, lanes }
    }

    /// Right before the step that lands the fault: waits (5 s at most) until
    /// requests and unpersisted acknowledged orders are both in flight, and fails
    /// unless they are.
    pub async fn lands(&self) -> InFlight {
        let landed = self.landing.lands().await;
        println!("steady stream: at the fault's landing {landed:?}");
        assert_in_flight(&landed);
        landed
    }

    /// Stops the stream and returns every answer, once each lane's last request is
    /// answered.
    pub async fn stop(self) -> Vec<Answer> {
        self.stop.store(true, SeqCst);
        let mut answers = Vec::new();
        for lane in self.lanes {
            answers.extend(lane.await.unwrap());
        }
        answers
    }
}

/// Until every order in `acknowledged` is in Postgres (60 s at most); fails
/// naming how many are not.
pub async fn assert_persisted(scenario: &str, pg: &sqlx::PgPool, voucher: i64, acknowledged: &[i64]) {
    let missing = || async {
        let stored: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM voucher_orders WHERE voucher_id = $1 AND (id = ANY($2) OR issued_id = ANY($2))",
        )
        .bind(voucher)
        .bind(acknowledged)
        .fetch_one(pg)
        .await
        .expect("the acknowledged orders in Postgres");
        acknowledged.len().saturating_sub(stored as usize)
    };
    let stored = crate::helpers::eventually(Duration::from_secs(60), || async {
        (missing().await == 0).then_some(())
    })
    .await;
    if stored.is_none() {
        panic!(
            "{scenario}: {} of {} acknowledged orders not in Postgres after 60 s",
            missing().await,
            acknowledged.len()
        );
    }
}

/// A crowd as [`crowd`]'s, without a fault.
pub async fn quiet_crowd(
    base: &str,
    jwt: &seckill::http::auth::JwtKeys,
    pg: &sqlx::PgPool,
    voucher: i64,
    shoppers: std::ops::Range<i64>,
) -> Tally {
    type NoFault = fn(Landing) -> std::future::Ready<()>;
    send::<NoFault, _>(base, jwt, pg, voucher, shoppers, None).await
}

async fn send<F, Fut>(
    base: &str,
    jwt: &seckill::http::auth::JwtKeys,
    pg: &sqlx::PgPool,
    voucher: i64,
    shoppers: std::ops::Range<i64>,
    during: Option<F>,
) -> Tally
where
    F: FnOnce(Landing) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    use futures::StreamExt;
    let client = shoppers_client();
    let url = format!("{base}/api/v1/vouchers/{voucher}/orders");
    let tokens: Vec<(i64, String)> = shoppers
        .map(|u| (u, jwt.mint(u, seckill::http::auth::Role::Shopper, 600)))
        .collect();
    let (total, quarter, half) = (tokens.len(), (tokens.len() / 4).max(1), tokens.len() / 2);
    let landing = Landing::new(pg, voucher);
    // The fault's phase: 0 not started, 1 being injected, 2 landed.
    let (phase_tx, phase) = tokio::sync::watch::channel(0u8);
    // Told by the answer that completes the first quarter.
    let first_quarter = Arc::new(tokio::sync::Notify::new());
    // The second quarter's requests in flight at once.
    let trickle = Arc::new(tokio::sync::Semaphore::new(4));
    let (probe, quarter_c) = (landing.clone(), first_quarter.clone());
    // The first quarter's shoppers, who order again while the fault is injected.
    let again: Vec<(i64, String)> = tokens[..quarter].to_vec();
    let (again_client, again_url) = (client.clone(), url.clone());
    // A task of its own: the fault may block its thread while requests go on.
    let requests = tokio::spawn(async move {
        futures::stream::iter(tokens.into_iter().enumerate())
            .map(|(i, (user, t))| {
                let (client, url) = (client.clone(), url.clone());
                let (probe, mut phase, first_quarter, trickle) =
                    (probe.clone(), phase.clone(), quarter_c.clone(), trickle.clone());
                async move {
                    let wait_for = match i {
                        i if i < quarter => 0,
                        i if i < half => 1,
                        _ => 2,
                    };
                    phase.wait_for(|p| *p >= wait_for).await.expect("the crowd's phases");
                    let _permit = match wait_for {
                        1 => Some(trickle.acquire_owned().await.unwrap()),
                        _ => None,
                    };
                    probe.sending();
                    let (status, id) = order(&client, &url, &t).await;
                    if probe.answered(id) == quarter {
                        first_quarter.notify_one();
                    }
                    (user, status, id, wait_for == 2)
                }
            })
            .buffer_unordered(32)
            .collect::<Vec<(i64, u16, Option<i64>, bool)>>()
            .await
    });
    tokio::time::timeout(Duration::from_secs(30), first_quarter.notified())
        .await
        .expect("the first quarter of the crowd answered within 30 s");
    phase_tx.send(1).unwrap();
    // Four loops of the first quarter's shoppers ordering again, until the fault
    // has landed.
    let loops = if during.is_some() { 4 } else { 0 };
    let pressure: Vec<_> = (0..loops)
        .map(|lane| {
            let (client, url, probe, again) = (again_client.clone(), again_url.clone(), landing.clone(), again.clone());
            let phase = phase_tx.subscribe();
            tokio::spawn(async move {
                let mut answers = Vec::new();
                for (user, t) in again.iter().skip(lane).step_by(4).cycle() {
                    if *phase.borrow() >= 2 {
                        break;
                    }
                    probe.sending();
                    let (status, id) = order(&client, &url, t).await;
                    probe.answered(id);
                    answers.push((*user, status, id, false));
                }
                answers
            })
        })
        .collect();
    if let Some(during) = during {
        during(landing.clone()).await;
    }
    let answered_when_landed = landing.answered.load(SeqCst);
    // (No receiver left if the crowd has finished.)
    let _ = phase_tx.send(2);
    let mut answers = requests.await.unwrap();
    for p in pressure {
        answers.extend(p.await.unwrap());
    }
    let accepted_after_fault = answers
        .iter()
        .filter(|(_, _, id, after)| id.is_some() && *after)
        .count();
    println!(
        "crowd: fault started after {quarter} answers, landed after {answered_when_landed} of {total}, \
         {accepted_after_fault} accepted after it"
    );
    let mut tally = Tally {
        accepted_after_fault,
        landed: *landing.seen.lock().unwrap(),
        ..Tally::default()
    };
    for (user, status, id, _) in answers {
        *tally.statuses.entry(status).or_default() += 1;
        tally.acknowledged.extend(id);
        tally.ids.extend(id);
        tally.answers.push((user, status));
    }
    tally
}

/// The HTTP client of a crowd's or a stream's shoppers.
fn shoppers_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        // Not reused once idle 2 s: actix closes a connection idle for 5 s.
        .pool_idle_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// One order of the shopper whose token is `token`: its status (0: no answer)
/// and, for a 202, the order id.
async fn order(client: &reqwest::Client, url: &str, token: &str) -> (u16, Option<i64>) {
    let Ok(resp) = client.post(url).bearer_auth(token).send().await else {
        return (0, None);
    };
    let status = resp.status();
    if status != StatusCode::ACCEPTED {
        return (status.as_u16(), None);
    }
    let body: Option<serde_json::Value> = resp.json().await.ok();
    let id = body.and_then(|b| b["order_id"].as_str()?.parse::<i64>().ok());
    (status.as_u16(), id)
}

/// After the fault: once the sale answers anything but a 5xx again (a probe
/// shopper tries, 60 s at most: a fault that closed the sale may outlast the
/// fault's crowd, whose shoppers were answered 503 at once), a crowd of 400 new
/// shoppers (more than any scenario's stock) at `base` buys what is left. Orders
/// must have been accepted after the fault landed, in the fault's crowd (its
/// second half) or in this one: a relay or worker that never came back leaves
/// them unpersisted, and `settle` fails. Returns `before`'s acknowledged orders
/// and answers with the probe's and this crowd's.
pub async fn after_the_fault(
    scenario: &str,
    base: &str,
    jwt: &seckill::http::auth::JwtKeys,
    pg: &sqlx::PgPool,
    voucher: i64,
    mut before: Tally,
) -> Tally {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let url = format!("{base}/api/v1/vouchers/{voucher}/orders");
    let probe = jwt.mint(99_999, seckill::http::auth::Role::Shopper, 600);
    let until = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (status, id) = order(&client, &url, &probe).await;
        if status != 0 && status < 500 {
            before.acknowledged.extend(id);
            before.ids.extend(id);
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "{scenario}: the sale answered {status} for 60 s after the fault"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = quiet_crowd(base, jwt, pg, voucher, 100_000..100_400).await;
    let accepted_after_fault = before.accepted_after_fault + after.acknowledged.len();
    println!(
        "fault {scenario}: {} acknowledged in the fault's crowd ({} sent after it landed; answers {:?}), {} later (answers {:?})",
        before.acknowledged.len(),
        before.accepted_after_fault,
        before.statuses,
        after.acknowledged.len(),
        after.statuses
    );
    assert!(
        accepted_after_fault > 0,
        "{scenario}: no order accepted after the fault"
    );
    let mut statuses = before.statuses;
    for (status, n) in after.statuses {
        *statuses.entry(status).or_default() += n;
    }
    Tally {
        acknowledged: before.acknowledged.union(&after.acknowledged).copied().collect(),
        accepted_after_fault,
        statuses,
        landed: before.landed,
        answers: before.answers.into_iter().chain(after.answers).collect(),
        ids: before.ids.into_iter().chain(after.ids).collect(),
    }
}

/// Waits for the drain, checks the invariants and prints the counts: every
/// acknowledged order persisted, none in flight, the whole stock sold exactly once
/// (a crowd answered 500 throughout sells nothing), Postgres's stock matches, the
/// audit balances, and `app`'s worker met no incident.
pub async fn settle(scenario: &str, app: &TestApp, voucher: i64, stock: i64, tally: &Tally) {
    settle_on(scenario, app, voucher, stock, tally, &[&app.addr]).await;
}

/// [`settle`], with the incidents of the workers of the instances at `workers`
/// (base URLs of `seckill all` or in-process instances; at least one of them must
/// have persisted orders).
pub async fn settle_on(scenario: &str, app: &TestApp, voucher: i64, stock: i64, tally: &Tally, workers: &[&str]) {
    settle_allowing(scenario, app, voucher, stock, tally, workers, &[]).await
}

/// [`settle_on`], but for incidents of the kinds `allowed` (the test's fault
/// forces them: e.g. `rescued_order`, an acknowledged order Redis lost and the
/// process that acknowledged it admitted again).
pub async fn settle_allowing(
    scenario: &str,
    app: &TestApp,
    voucher: i64,
    stock: i64,
    tally: &Tally,
    workers: &[&str],
    allowed: &[&str],
) {
    let pg = app.pg();
    let audit_path = format!("/api/v1/admin/vouchers/{voucher}/audit");
    // Until every acknowledged order is persisted and nothing Redis admitted is still
    // on its way (the audit counts none in flight), or 60 s.
    let drained = eventually(Duration::from_secs(60), || async {
        let stored: HashSet<i64> = sqlx::query_scalar("SELECT id FROM voucher_orders WHERE voucher_id = $1")
            .bind(voucher)
            .fetch_all(pg)
            .await
            .ok()?
            .into_iter()
            .collect();
        let (status, audit) = app.get(&audit_path, Some(&app.admin())).await;
        (tally.acknowledged.is_subset(&stored) && status == StatusCode::OK && audit["in_flight"]["orders"] == 0)
            .then_some(())
    })
    .await;
    let rows: Vec<(i64, i64, String)> =
        sqlx::query_as("SELECT id, user_id, status FROM voucher_orders WHERE voucher_id = $1")
            .bind(voucher)
            .fetch_all(pg)
            .await
            .unwrap();
    let persisted: HashSet<i64> = rows.iter().map(|r| r.0).collect();
    let lost = tally.acknowledged.difference(&persisted).count();
    let live: Vec<&(i64, i64, String)> = rows.iter().filter(|r| r.2 == "created" || r.2 == "paid").collect();
    // (No shopper can hold two live orders: a unique index says so. What shows one
    // sold twice is a refused order, counted in `failed` and as an incident.)
    let failed = rows.iter().filter(|r| r.2 == "failed").count();
    let pg_stock: i32 = sqlx::query_scalar("SELECT stock FROM seckill_vouchers WHERE voucher_id = $1")
        .bind(voucher)
        .fetch_one(pg)
        .await
        .unwrap();
    let (status, audit) = app.get(&audit_path, Some(&app.admin())).await;
    println!(
        "fault {scenario}: acknowledged {}, persisted {}, lost {lost}, failed {failed}, live {}, stock {stock}, postgres stock left {pg_stock}, in flight {}",
        tally.acknowledged.len(),
        persisted.len(),
        live.len(),
        audit["in_flight"]["orders"]
    );
    let distinct: HashSet<i64> = tally.ids.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        tally.ids.len(),
        "{scenario}: one order id acknowledged to two shoppers"
    );
    assert_eq!(lost, 0, "{scenario}: acknowledged orders lost");
    assert_eq!(failed, 0, "{scenario}: the database refused orders Redis accepted");
    assert_eq!(status, StatusCode::OK, "{scenario}: audit: {audit}");
    assert_eq!(
        audit["in_flight"]["orders"], 0,
        "{scenario}: orders stranded in flight: {audit:#}"
    );
    assert!(drained.is_some(), "{scenario}: not drained within 60 s");
    assert_eq!(
        live.len() as i64,
        stock,
        "{scenario}: the whole stock sold, exactly once"
    );
    assert_eq!(pg_stock, 0, "{scenario}: Postgres stock matches the orders");
    assert_eq!(
        audit["balanced"], true,
        "{scenario}: the sale's books do not balance: {audit:#}"
    );
    assert_no_incidents_but(scenario, workers, allowed).await;
}
