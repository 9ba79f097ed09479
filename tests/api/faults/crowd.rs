//! The fault suite's harness: a crowd of shoppers with a fault injected while their
//! requests are in flight, and the checks every scenario ends with.
use crate::helpers::*;
use reqwest::StatusCode;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// The orders the crowd was told were accepted (202).
pub struct Tally {
    pub acknowledged: HashSet<i64>,
}

/// Fires one request per shopper at `base`, 32 at a time, and injects the fault
/// (`during`) while they are in flight: once a quarter of them have been answered,
/// with the rest still going out. Returns the acknowledged order ids.
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
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let url = format!("{base}/api/v1/vouchers/{voucher}/orders");
    let tokens: Vec<String> = shoppers
        .map(|u| jwt.mint(u, seckill::http::auth::Role::Shopper, 600))
        .collect();
    let quarter = tokens.len() / 4;
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = answered.clone();
    // A task of its own: the fault may block its thread while requests go on.
    let requests = tokio::spawn(async move {
        futures::stream::iter(tokens)
            .map(|t| {
                let (client, url, counter) = (client.clone(), url.clone(), counter.clone());
                async move {
                    let resp = client.post(&url).bearer_auth(t).send().await;
                    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let resp = resp.ok()?;
                    if resp.status() != StatusCode::ACCEPTED {
                        return None;
                    }
                    let body: serde_json::Value = resp.json().await.ok()?;
                    body["order_id"].as_str()?.parse::<i64>().ok()
                }
            })
            .buffer_unordered(32)
            .filter_map(|id| async move { id })
            .collect::<HashSet<i64>>()
            .await
    });
    eventually(Duration::from_secs(30), || {
        let answered = answered.clone();
        async move { (answered.load(std::sync::atomic::Ordering::Relaxed) >= quarter).then_some(()) }
    })
    .await
    .expect("a quarter of the crowd answered");
    during().await;
    let in_flight_after = answered.load(std::sync::atomic::Ordering::Relaxed);
    let acknowledged = requests.await.unwrap();
    println!(
        "crowd: fault injected after {quarter}+ answers, {} answered by the time it was in place",
        in_flight_after
    );
    Tally { acknowledged }
}

/// Waits for the drain, checks the invariants and prints the counts; then the
/// sale's audit (through `app`'s API) must balance.
pub async fn settle(scenario: &str, app: &TestApp, voucher: i64, stock: i64, tally: &Tally) {
    let pg = app.pg();
    let audit_path = format!("/api/v1/admin/vouchers/{voucher}/audit");
    // Until every acknowledged order is persisted and nothing Redis admitted is still
    // on its way (the audit counts none in flight), or 60 s: the checks below then
    // tell what is missing.
    eventually(Duration::from_secs(60), || async {
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
    println!(
        "fault {scenario}: acknowledged {}, persisted {}, lost {lost}, duplicated {duplicated}, failed {failed}, stock {stock}, postgres stock left {pg_stock}",
        tally.acknowledged.len(),
        persisted.len()
    );
    assert_eq!(lost, 0, "{scenario}: acknowledged orders lost");
    assert_eq!(duplicated, 0, "{scenario}: a shopper holds two orders");
    assert!(live.len() as i64 <= stock, "{scenario}: oversold");
    assert_eq!(
        pg_stock as i64,
        stock - live.len() as i64,
        "{scenario}: Postgres stock matches the orders"
    );
    assert_eq!(failed, 0, "{scenario}: the database refused orders Redis accepted");
    let (status, audit) = app.get(&audit_path, Some(&app.admin())).await;
    assert_eq!(status, StatusCode::OK, "{scenario}: audit: {audit}");
    println!(
        "fault {scenario}: audit balanced {}, in flight {}, redis stock left {}",
        audit["balanced"], audit["in_flight"]["orders"], audit["redis"]["stock_remaining"]
    );
    assert_eq!(
        audit["balanced"], true,
        "{scenario}: the sale's books do not balance: {audit:#}"
    );
}
