//! audit: `audit_balances_after_orders_and_a_cancellation`,
//! `audit_counts_orders_held_in_the_outbox_as_in_flight`,
//! `audit_names_the_failed_check_and_the_gauge_counts_the_running_sale`,
//! `orders_redis_has_no_record_of_unbalance_the_books`,
//! `a_failed_order_unbalances_the_books_before_and_after_a_repair`.
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn audit_balances_after_orders_and_a_cancellation() {
    let ns = Namespace::new().await;
    let app = Arc::new(TestApp::spawn(&ns).await);
    let v = app.flash_sale(50).await;
    let accepted = join_all((1..=30).map(|user| {
        let app = app.clone();
        tokio::spawn(async move { (user, app.order(v, user).await) })
    }))
    .await;
    let mut orders = Vec::new();
    for r in accepted {
        let (user, (status, body)) = r.unwrap();
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        orders.push((user, body["order_id"].as_str().unwrap().to_owned()));
    }
    let persisted = eventually(Duration::from_secs(20), || async {
        let a = audit(&app, v).await;
        (a["postgres"]["created"] == 30).then_some(a)
    })
    .await
    .expect("every order persisted");
    assert_eq!(persisted["in_flight"]["orders"], 0, "{persisted}");
    assert_eq!(persisted["balanced"], true, "{persisted}");

    let (user, id) = &orders[7];
    let (status, body) = app
        .post(
            &format!("/api/v1/orders/{id}/cancel"),
            Some(&app.shopper(*user)),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let a = audit(&app, v).await;
    let expected = json!({
        "voucher_id": v.to_string(),
        "stock": 50,
        "redis": {"stock_remaining": 21, "orders_admitted": 30, "units_returned": 1, "outbox": 0, "units_in_transit": 0},
        "in_flight": {"orders": 0, "outbox": 0, "queue_ready": 0},
        "postgres": {"created": 29, "paid": 0, "cancelled": 1, "failed": 0, "stock": 21, "returns_pending": 0},
        "balanced": true,
        "checks": {"units_accounted_for": true, "postgres_stock": true, "no_returns_pending": true,
                   "orders_known_to_redis": true, "no_failed_orders": true},
    });
    assert_eq!(a, expected, "{a:#}");
    Arc::try_unwrap(app).ok().expect("no other holder").shutdown().await;
}

#[tokio::test]
async fn audit_counts_orders_held_in_the_outbox_as_in_flight() {
    let ns = Namespace::new().await;
    // No relay, no worker: accepted orders stay in the outbox.
    let app = TestApp::builder(&ns).api_only().spawn().await;
    let v = app.flash_sale(10).await;
    for user in 1..=4 {
        assert_eq!(app.order(v, user).await.0, StatusCode::ACCEPTED);
    }
    let a = audit(&app, v).await;
    assert_eq!(a["redis"]["stock_remaining"], 6, "{a:#}");
    assert_eq!(a["redis"]["orders_admitted"], 4, "{a:#}");
    assert_eq!(a["redis"]["outbox"], 4, "{a:#}");
    assert_eq!(a["in_flight"]["orders"], 4, "{a:#}");
    assert_eq!(a["in_flight"]["outbox"], 4, "{a:#}");
    assert_eq!(a["postgres"]["created"], 0, "{a:#}");
    assert_eq!(a["postgres"]["stock"], 10, "{a:#}");
    assert_eq!(a["balanced"], true, "{a:#}");
    app.shutdown().await;
}

#[tokio::test]
async fn audit_names_the_failed_check_and_the_gauge_counts_the_running_sale() {
    let ns = Namespace::new().await;
    let app = TestApp::builder(&ns)
        .env("SECKILL_AUDIT_INTERVAL_MS", "100")
        .spawn()
        .await;
    let v = app.flash_sale(20).await;
    let now = chrono::Utc::now();
    // Not running yet: its books are not watched.
    let later = app
        .flash_sale_between(20, now + chrono::Duration::hours(1), now + chrono::Duration::hours(2))
        .await;
    assert_eq!(app.order(v, 1).await.0, StatusCode::ACCEPTED);
    eventually(Duration::from_secs(10), || async {
        (audit(&app, v).await["postgres"]["created"] == 1).then_some(())
    })
    .await
    .expect("the order persisted");
    assert_eq!(audit(&app, v).await["balanced"], true);

    // Units vanish from Redis behind the service's back.
    let keys = ns.keys();
    let mut redis = app.redis().await;
    for sale in [v, later] {
        let _: i64 = redis::cmd("DECRBY")
            .arg(keys.stock(sale))
            .arg(3)
            .query_async(&mut redis)
            .await
            .unwrap();
    }
    let a = audit(&app, v).await;
    assert_eq!(a["balanced"], false, "{a:#}");
    assert_eq!(a["redis"]["stock_remaining"], 16, "{a:#}");
    assert_eq!(
        a["checks"],
        json!({"units_accounted_for": false, "postgres_stock": true, "no_returns_pending": true,
               "orders_known_to_redis": true, "no_failed_orders": true}),
        "{a:#}"
    );
    assert_eq!(audit(&app, later).await["balanced"], false);

    let series = "seckill_sales_unbalanced";
    let seen = eventually(Duration::from_secs(10), || async {
        gauge(&app, series).await.filter(|n| *n >= 1.0)
    })
    .await;
    assert_eq!(seen, Some(1.0), "the running sale, and only it, is counted");

    // Put the units back: balanced again, and the gauge follows.
    let _: i64 = redis::cmd("INCRBY")
        .arg(keys.stock(v))
        .arg(3)
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(audit(&app, v).await["balanced"], true);
    let cleared = eventually(Duration::from_secs(10), || async {
        gauge(&app, series).await.filter(|n| *n == 0.0)
    })
    .await;
    assert_eq!(cleared, Some(0.0), "the gauge drops once the books balance");
    app.shutdown().await;
}

/// Three orders persisted, then the sale in Redis goes back to before them (its
/// stock back up, its record of admitted orders gone), as a Redis restored from an
/// older snapshot would be: the units sum still agrees (the lost orders' units are
/// "on sale" in Redis and "live" in Postgres), but Postgres holds orders Redis
/// never admitted, and the books say so.
#[tokio::test]
async fn orders_redis_has_no_record_of_unbalance_the_books() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(10).await;
    for user in 1..=3 {
        assert_eq!(app.order(v, user).await.0, StatusCode::ACCEPTED);
    }
    eventually(Duration::from_secs(20), || async {
        let a = audit(&app, v).await;
        (a["postgres"]["created"] == 3 && a["balanced"] == true).then_some(())
    })
    .await
    .expect("three orders persisted, the books balanced");
    let keys = ns.keys();
    let mut redis = app.redis().await;
    let _: () = redis::pipe()
        .cmd("INCRBY")
        .arg(keys.stock(v))
        .arg(3)
        .ignore()
        .cmd("DEL")
        .arg(keys.admitted(v))
        .ignore()
        .query_async(&mut redis)
        .await
        .unwrap();
    let a = audit(&app, v).await;
    assert_eq!(a["in_flight"]["orders"], -3, "{a:#}");
    assert_eq!(a["checks"]["units_accounted_for"], true, "the sums alone agree: {a:#}");
    assert_eq!(a["checks"]["orders_known_to_redis"], false, "{a:#}");
    assert_eq!(a["balanced"], false, "{a:#}");
    app.shutdown().await;
}

/// An order the database refused (`failed`: Redis admitted it, Postgres did not
/// sell its unit) unbalances the books; a repair then rebuilds the sale in Redis
/// from Postgres, after which every sum agrees, and the books still show the
/// incident.
#[tokio::test]
async fn a_failed_order_unbalances_the_books_before_and_after_a_repair() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(10).await;
    let before = repairs_of(&app, v).await;
    let mut ids = Vec::new();
    for user in 1..=3 {
        let (status, body) = app.order(v, user).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        ids.push(body["order_id"].as_str().unwrap().parse::<i64>().unwrap());
    }
    eventually(Duration::from_secs(20), || async {
        (audit(&app, v).await["postgres"]["created"] == 3).then_some(())
    })
    .await
    .expect("three orders persisted");
    // As the worker stores an order the database refused: `failed`, its unit not sold.
    let mut tx = app.pg().begin().await.unwrap();
    sqlx::query("UPDATE voucher_orders SET status = 'failed' WHERE id = $1")
        .bind(ids[0])
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("UPDATE seckill_vouchers SET stock = stock + 1 WHERE voucher_id = $1")
        .bind(v)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let a = audit(&app, v).await;
    assert_eq!(a["postgres"]["failed"], 1, "{a:#}");
    assert_eq!(a["checks"]["no_failed_orders"], false, "{a:#}");
    assert_eq!(a["balanced"], false, "before a repair: {a:#}");

    // Redis loses the sale's stock: the next order finds it and the sale is
    // repaired from Postgres.
    let mut redis = app.redis().await;
    let _: () = redis::cmd("DEL")
        .arg(ns.keys().stock(v))
        .query_async(&mut redis)
        .await
        .unwrap();
    let (status, body) = app.order(v, 99).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    repaired_after(&app, v, before).await;
    let a = audit(&app, v).await;
    assert_eq!(a["redis"]["stock_remaining"], 8, "rebuilt from Postgres: {a:#}");
    assert_eq!(a["checks"]["no_failed_orders"], false, "{a:#}");
    assert_eq!(a["balanced"], false, "after a repair: {a:#}");
    app.shutdown().await;
}
