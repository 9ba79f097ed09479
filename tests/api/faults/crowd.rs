//! The fault suite's harness: a crowd of shoppers with a fault injected while their
//! requests are in flight, and the checks every scenario ends with.
use crate::helpers::*;
use reqwest::StatusCode;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// The orders the crowd was told were accepted (202), and how many answers of
/// each status it got (0: no answer at all).
#[derive(Default)]
pub struct Tally {
    pub acknowledged: HashSet<i64>,
    /// How many of them were sent after the fault had landed.
    pub accepted_after_fault: usize,
    pub statuses: std::collections::BTreeMap<u16, usize>,
}

/// Fires one request per shopper at `base`, 32 at a time, with the fault (`during`)
/// injected in the middle, by construction rather than by timing: the first
/// quarter goes out at once; the fault starts when all of them are answered, and
/// the second quarter is released at that instant, racing the injection; the
/// second half waits until the fault has landed (`during` returned), so that it
/// always meets requests, however long it takes to inject (a `rabbitmqctl` call
/// takes a second or more). Fails unless requests were answered after it landed.
/// Returns the acknowledged order ids.
pub async fn crowd<F, Fut>(
    base: &str,
    jwt: &seckill::http::auth::JwtKeys,
    voucher: i64,
    shoppers: std::ops::Range<i64>,
    during: F,
) -> Tally
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    use futures::StreamExt;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        // Not reused once idle 2 s: actix closes a connection idle for 5 s.
        .pool_idle_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let url = format!("{base}/api/v1/vouchers/{voucher}/orders");
    let tokens: Vec<String> = shoppers
        .map(|u| jwt.mint(u, seckill::http::auth::Role::Shopper, 600))
        .collect();
    let (total, quarter, half) = (tokens.len(), (tokens.len() / 4).max(1), tokens.len() / 2);
    let answered = Arc::new(AtomicUsize::new(0));
    // The fault's phase: 0 not started, 1 being injected, 2 landed.
    let (phase_tx, phase) = tokio::sync::watch::channel(0u8);
    // Told by the answer that completes the first quarter.
    let first_quarter = Arc::new(tokio::sync::Notify::new());
    let (answered_c, quarter_c) = (answered.clone(), first_quarter.clone());
    // A task of its own: the fault may block its thread while requests go on.
    let requests = tokio::spawn(async move {
        futures::stream::iter(tokens.into_iter().enumerate())
            .map(|(i, t)| {
                let (client, url) = (client.clone(), url.clone());
                let (answered, mut phase, first_quarter) = (answered_c.clone(), phase.clone(), quarter_c.clone());
                async move {
                    let wait_for = match i {
                        i if i < quarter => 0,
                        i if i < half => 1,
                        _ => 2,
                    };
                    phase.wait_for(|p| *p >= wait_for).await.expect("the crowd's phases");
                    let resp = client.post(&url).bearer_auth(t).send().await;
                    if answered.fetch_add(1, SeqCst) + 1 == quarter {
                        first_quarter.notify_one();
                    }
                    let Ok(resp) = resp else { return (0, None, false) };
                    let status = resp.status();
                    if status != StatusCode::ACCEPTED {
                        return (status.as_u16(), None, false);
                    }
                    let body: Option<serde_json::Value> = resp.json().await.ok();
                    let id = body.and_then(|b| b["order_id"].as_str()?.parse::<i64>().ok());
                    (status.as_u16(), id, wait_for == 2)
                }
            })
            .buffer_unordered(32)
            .collect::<Vec<(u16, Option<i64>, bool)>>()
            .await
    });
    tokio::time::timeout(Duration::from_secs(30), first_quarter.notified())
        .await
        .expect("the first quarter of the crowd answered within 30 s");
    phase_tx.send(1).unwrap();
    during().await;
    let answered_when_landed = answered.load(SeqCst);
    // (No receiver left if the crowd has finished: the assertion below says so.)
    let _ = phase_tx.send(2);
    let answers = requests.await.unwrap();
    let answered_after = total - answered_when_landed;
    let accepted_after_fault = answers.iter().filter(|(_, id, after)| id.is_some() && *after).count();
    println!(
        "crowd: fault started after {quarter} answers, landed after {answered_when_landed}, {answered_after} answered after it, {accepted_after_fault} of them accepted"
    );
    assert!(answered_after > 0, "the fault landed after the crowd had been answered");
    let mut tally = Tally {
        accepted_after_fault,
        ..Tally::default()
    };
    for (status, id, _) in answers {
        *tally.statuses.entry(status).or_default() += 1;
        tally.acknowledged.extend(id);
    }
    tally
}

/// After the fault: a crowd of 400 new shoppers (more than any scenario's stock)
/// at `base` buys what is left. Orders must have been accepted after the fault
/// landed, in the fault's crowd (its second half) or in this one: a relay or
/// worker that never came back leaves them unpersisted, and `settle` fails.
/// Returns `before`'s acknowledged orders and answers with this crowd's.
pub async fn after_the_fault(
    scenario: &str,
    base: &str,
    jwt: &seckill::http::auth::JwtKeys,
    voucher: i64,
    before: Tally,
) -> Tally {
    let after = crowd(base, jwt, voucher, 100_000..100_400, || async {}).await;
    let accepted_after_fault = before.accepted_after_fault + after.acknowledged.len();
    println!(
        "fault {scenario}: {} acknowledged in the fault's crowd ({} sent after it landed), {} later",
        before.acknowledged.len(),
        before.accepted_after_fault,
        after.acknowledged.len()
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
    let shoppers: HashSet<i64> = live.iter().map(|r| r.1).collect();
    let duplicated = live.len() - shoppers.len();
    let failed = rows.iter().filter(|r| r.2 == "failed").count();
    let pg_stock: i32 = sqlx::query_scalar("SELECT stock FROM seckill_vouchers WHERE voucher_id = $1")
        .bind(voucher)
        .fetch_one(pg)
        .await
        .unwrap();
    let (status, audit) = app.get(&audit_path, Some(&app.admin())).await;
    println!(
        "fault {scenario}: acknowledged {}, persisted {}, lost {lost}, duplicated {duplicated}, failed {failed}, live {}, stock {stock}, postgres stock left {pg_stock}, in flight {}",
        tally.acknowledged.len(),
        persisted.len(),
        live.len(),
        audit["in_flight"]["orders"]
    );
    assert_eq!(lost, 0, "{scenario}: acknowledged orders lost");
    assert_eq!(duplicated, 0, "{scenario}: a shopper holds two orders");
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
    assert_no_incidents(scenario, workers).await;
}
