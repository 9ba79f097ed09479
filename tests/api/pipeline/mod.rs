//! From the outbox to Postgres: nothing acknowledged is lost or written twice when
//! the API dies before publishing, a relay dies holding entries, a message comes
//! twice, is poison or dead-lettered, or Postgres is away; order ids stay unique when
//! Redis loses their counter.
use crate::helpers::*;
use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::BasicProperties;
use reqwest::StatusCode;
use seckill::app::Mode;
use seckill::broker::ORDERS_ROUTING_KEY;
use seckill::ordering::model::{OrderBatch, OrderMsg};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// A relay of the test's own on `app`'s connections.
fn relay(app: &TestApp, name: &str) -> seckill::ordering::outbox::relay::Relay {
    let state = app.app().state();
    seckill::ordering::outbox::relay::Relay::new(
        seckill::ordering::outbox::relay::Ends {
            redis: state.handles.redis.clone(),
            broker: state.handles.broker.clone(),
            pg: state.handles.background_pg.clone(),
            recovery: state.recovery.clone(),
        },
        state.handles.keys.clone(),
        state.handles.cache.clone(),
        name.into(),
        &state.settings,
        state.metrics.clone(),
    )
}

async fn persisted(app: &TestApp, v: i64) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM voucher_orders WHERE voucher_id = $1 AND status = 'created'")
        .bind(v)
        .fetch_one(app.pg())
        .await
        .unwrap()
}

async fn wait_persisted(app: &TestApp, v: i64, n: i64) {
    let got = eventually(Duration::from_secs(20), || async {
        (persisted(app, v).await == n).then_some(())
    })
    .await;
    assert!(
        got.is_some(),
        "expected {n} persisted orders, have {}",
        persisted(app, v).await
    );
}

/// Messages ready in the namespace's orders queue (delivered ones do not count).
async fn orders_ready(ns: &Namespace) -> u32 {
    let (conn, ch) = ns.broker().open().await.unwrap();
    let queue = ch
        .queue_declare(
            ns.keys().orders_queue().into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    conn.close(200, "done".into()).await.unwrap();
    queue.message_count()
}

async fn publish_raw(ns: &Namespace, body: &[u8]) {
    let b = ns.broker();
    let (conn, ch) = b.open().await.unwrap();
    ch.confirm_select(Default::default()).await.unwrap();
    let confirm = ch
        .basic_publish(
            ns.keys().orders_exchange().into(),
            ORDERS_ROUTING_KEY.into(),
            BasicPublishOptions::default(),
            body,
            BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(confirm.is_ack());
    conn.close(200, "done".into()).await.unwrap();
}

/// Until the relay has published `n` orders and they wait in the queue (read
/// through the application's own broker settings: its queue arguments may differ
/// from the namespace's defaults).
async fn wait_published(app: &TestApp, ns: &Namespace, n: u64) {
    let state = app.app().state();
    let ready = || async {
        let (conn, ch) = state.handles.broker.open().await.ok()?;
        let passive = QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        let q = ch
            .queue_declare(ns.keys().orders_queue().into(), passive, FieldTable::default())
            .await
            .ok()?;
        let _ = conn.close(200, "done".into()).await;
        Some(q.message_count() as u64)
    };
    let seen = eventually(Duration::from_secs(20), || async {
        let (published, ready) = (state.metrics.relay_published.get(), ready().await?);
        // Messages carry batches: with no consumer, every published one is ready.
        (published >= n && ready > 0).then_some(())
    })
    .await;
    assert!(
        seen.is_some(),
        "the orders published: {} published, {:?} ready",
        state.metrics.relay_published.get(),
        ready().await
    );
}

mod formats;
mod generations;
mod outages_and_acks;
mod quarantine;
mod redelivery;
mod unreadable;
