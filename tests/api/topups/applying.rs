//! topups:
//! `a_top_up_whose_process_dies_before_its_commit_leaves_redis_no_unit_postgres_lacks`,
//! `a_top_up_committed_while_redis_is_unreachable_is_put_on_sale_once_by_recovery`,
//! `a_top_up_on_a_live_sold_out_sale_is_sellable_at_once`,
//! `a_top_up_past_the_stock_limit_is_a_conflict_and_changes_nothing`,
//! `concurrent_top_ups_cannot_pass_the_stock_limit_together`,
//! `the_same_top_up_applied_twice_adds_its_units_once`.
use super::*;

/// The crash window of the old order of things (Redis first, then the Postgres
/// commit): the process dies while its top-up's commit is in flight. Redis must
/// not be left holding units that Postgres never got: they would be sold and then
/// stored as `failed`.
///
/// The commit is held by a deferred trigger that waits for an advisory lock the
/// test holds; the process is then killed (its request dies with it) and its
/// transaction ends without committing, as a crashed client's does.
#[tokio::test]
async fn a_top_up_whose_process_dies_before_its_commit_leaves_redis_no_unit_postgres_lacks() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(3).await;
    let url = ns.vars["DATABASE_URL"].clone();
    let mut holder = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("SELECT pg_advisory_lock(4242)")
        .execute(&mut holder)
        .await
        .unwrap();
    sqlx::raw_sql(
        "CREATE FUNCTION hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_advisory_xact_lock(4242); RETURN NULL; END $$;
         CREATE CONSTRAINT TRIGGER hold_commit AFTER UPDATE ON seckill_vouchers
           DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
           WHEN (NEW.total_stock <> OLD.total_stock) EXECUTE FUNCTION hold_commit();",
    )
    .execute(&mut holder)
    .await
    .unwrap();

    let request = {
        let (client, addr, token) = (app.client.clone(), app.addr.clone(), app.admin());
        tokio::spawn(async move {
            client
                .post(format!("{addr}/api/v1/admin/vouchers/{v}/stock"))
                .bearer_auth(token)
                .json(&json!({"add": 4}))
                .send()
                .await
        })
    };
    let pid: i32 = eventually(Duration::from_secs(10), || async {
        sqlx::query_scalar(
            "SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
              WHERE l.locktype = 'advisory' AND l.objid = 4242 AND NOT l.granted
                AND a.datname = current_database()",
        )
        .fetch_optional(app.pg())
        .await
        .unwrap()
    })
    .await
    .expect("the top-up's commit waits for the test's lock");

    // The process dies with the commit in flight; its transaction ends uncommitted.
    app.crash().await;
    let _ = request.await;
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .execute(&mut admin)
        .await
        .unwrap();
    eventually(Duration::from_secs(10), || {
        let url = url.clone();
        async move {
            let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = $1")
                .bind(pid)
                .fetch_one(&mut c)
                .await
                .unwrap();
            (n == 0).then_some(())
        }
    })
    .await
    .expect("the dead process's transaction is gone");
    sqlx::raw_sql("DROP TRIGGER hold_commit ON seckill_vouchers; SELECT pg_advisory_unlock(4242);")
        .execute(&mut holder)
        .await
        .unwrap();

    let app = TestApp::spawn(&ns).await;
    let (pg_left, pg_total) = pg_stock(app.pg(), v).await;
    let in_redis = redis_stock(&app, &ns, v).await;
    let accepted = sell(&app, v, 1..13).await;
    let (created, failed) = persisted(app.pg(), v, accepted).await;
    assert_eq!(
        (in_redis, accepted, created, failed),
        (Some(pg_left), pg_total, pg_total, 0),
        "Redis stock after the crash, orders accepted, stored created, stored failed \
         (Postgres: {pg_left} left of {pg_total})"
    );
    app.shutdown().await;
}

/// The crash window of the new order of things: the top-up is committed in
/// Postgres, and its Redis half does not happen (here: the instance that took the
/// request cannot reach Redis). The answer is still 200 (the top-up is recorded;
/// a retry would add it twice), and the recovery pass of another instance puts the
/// units on sale, once: every unit Postgres has is sold, nothing is stored
/// `failed`.
#[tokio::test]
async fn a_top_up_committed_while_redis_is_unreachable_is_put_on_sale_once_by_recovery() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(3).await;
    let cut_off = TestApp::builder(&ns)
        .env("REDIS_URL", "redis://127.0.0.1:1")
        .api_only()
        .spawn()
        .await;
    let (status, body) = top_up(&cut_off, v, 4).await;
    assert_eq!(status, StatusCode::OK, "the top-up is recorded: {body}");
    assert_eq!(body["stock"], 7, "{body}");
    assert_eq!(body["top_up"]["applied"], false, "{body}");
    cut_off.shutdown().await;
    assert_eq!(pg_stock(app.pg(), v).await, (7, 7));

    let pending = || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM stock_topups WHERE done_at IS NULL")
            .fetch_one(app.pg())
            .await
            .unwrap();
        n
    };
    // On sale in Redis, then marked done (the same step commits right after).
    let done = eventually(Duration::from_secs(30), || async {
        (app.stats(v).await["stock_remaining"] == 7 && pending().await == 0).then_some(())
    })
    .await;
    assert!(
        done.is_some(),
        "the recovery pass puts the 4 units on sale and marks the top-up done; stats: {}, pending: {}",
        app.stats(v).await,
        pending().await
    );

    let accepted = sell(&app, v, 1..13).await;
    let (created, failed) = persisted(app.pg(), v, accepted).await;
    assert_eq!((accepted, created, failed), (7, 7, 0));
    assert_eq!(pg_stock(app.pg(), v).await, (0, 7));
    assert_eq!(redis_stock(&app, &ns, v).await, Some(0));
    app.shutdown().await;
}

/// Units added to a running, sold-out sale are on sale at once on the instance
/// that took the top-up, and on the others as soon as the stock event reaches
/// them.
#[tokio::test]
async fn a_top_up_on_a_live_sold_out_sale_is_sellable_at_once() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let other = TestApp::builder(&ns).api_only().spawn().await;
    let v = app.flash_sale(1).await;
    assert_eq!(sell(&app, v, 1..2).await, 1);
    // Both instances have seen "sold out" (and keep a local flag). The other one
    // learns of the new sale by its event: until then it answers voucher_not_found
    // (seen in a full run of the suite, where the event came after the first sale).
    assert_eq!(code(&app.order(v, 2).await.1), "sold_out");
    eventually(Duration::from_secs(5), || async {
        (code(&other.order(v, 3).await.1) == "sold_out").then_some(())
    })
    .await
    .expect("the other instance learns of the sale and finds it sold out");

    let (status, body) = top_up(&app, v, 2).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["stats"]["stock_remaining"], 2, "{body}");
    let (status, body) = app.order(v, 2).await;
    assert_eq!(status, StatusCode::ACCEPTED, "at once on this instance: {body}");
    eventually(Duration::from_secs(5), || async {
        (other.order(v, 3).await.0 == StatusCode::ACCEPTED).then_some(())
    })
    .await
    .expect("on sale on the other instance");
    assert_eq!(code(&app.order(v, 4).await.1), "sold_out");
    let (created, failed) = persisted(app.pg(), v, 3).await;
    assert_eq!((created, failed), (3, 0));
    assert_eq!(pg_stock(app.pg(), v).await, (0, 3));
    other.shutdown().await;
    app.shutdown().await;
}

/// A valid `add` that the voucher's stock leaves no room for is a conflict with the
/// voucher's state (409), not a bad request: the body alone is fine (the OpenAPI
/// document allows any `add` up to 100,000,000, and schemathesis sends such ones).
#[tokio::test]
async fn a_top_up_past_the_stock_limit_is_a_conflict_and_changes_nothing() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(99_999_990).await;
    let (status, body) = top_up(&app, v, 11).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(code(&body), "stock_limit_exceeded");
    assert_eq!(pg_stock(app.pg(), v).await, (99_999_990, 99_999_990));
    let (status, body) = top_up(&app, v, 10).await;
    assert_eq!(status, StatusCode::OK, "up to the limit exactly: {body}");
    assert_eq!(pg_stock(app.pg(), v).await, (100_000_000, 100_000_000));
    // What the body itself gets wrong is still 400.
    assert_eq!(top_up(&app, v, 0).await.0, StatusCode::BAD_REQUEST);
    app.shutdown().await;
}

/// Concurrent top-ups are checked against the limit one after the other, by the
/// UPDATE that adds them: of 16 at once that would each fit alone, exactly those
/// that fit together pass, and the rest are 409. A total already past `int4`'s
/// reach for one more (a sale stored before the limit was enforced so) answers
/// 409 too, never 500.
#[tokio::test]
async fn concurrent_top_ups_cannot_pass_the_stock_limit_together() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(10).await;
    let answers = futures::future::join_all((0..16).map(|_| top_up(&app, v, 20_000_000))).await;
    let passed = answers.iter().filter(|(s, _)| *s == StatusCode::OK).count();
    for (status, body) in &answers {
        assert!(
            *status == StatusCode::OK || (*status == StatusCode::CONFLICT && code(body) == "stock_limit_exceeded"),
            "{status} {body}"
        );
    }
    assert_eq!(passed, 4, "10 + 4 x 20,000,000 fits, a fifth does not");
    assert_eq!(pg_stock(app.pg(), v).await, (80_000_010, 80_000_010));
    assert_eq!(redis_stock(&app, &ns, v).await, Some(80_000_010));

    let w = app.flash_sale(1).await;
    sqlx::query("UPDATE seckill_vouchers SET stock = 2147000000, total_stock = 2147000000 WHERE voucher_id = $1")
        .bind(w)
        .execute(app.pg())
        .await
        .unwrap();
    let (status, body) = top_up(&app, w, 1_000_000).await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "stock_limit_exceeded"));
    app.shutdown().await;
}

/// The crash window, step by step through the domain functions: the Postgres
/// half commits, the process "dies" before the Redis half. The recovery pass
/// finishes it; applying the same top-up again, concurrently, or after a crash
/// between the Redis step and marking it done adds its units once.
#[tokio::test]
async fn the_same_top_up_applied_twice_adds_its_units_once() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let v = app.flash_sale(2).await;
    let st = app.app().state();
    let (pg, redis, keys, recovery) = (&st.handles.pg, &st.handles.redis, &st.handles.keys, &st.recovery);

    let mut tx = pg.begin().await.unwrap();
    let t = topup::record(&mut tx, v, 3).await.unwrap().expect("a flash sale");
    tx.commit().await.unwrap();
    assert_eq!(pg_stock(pg, v).await, (5, 5));
    assert_eq!(redis_stock(&app, &ns, v).await, Some(2), "committed, not applied yet");

    assert_eq!(st.ordering.lifecycle.recover_topups(Duration::ZERO).await.unwrap(), 1);
    assert_eq!(redis_stock(&app, &ns, v).await, Some(5));
    assert_eq!(
        st.ordering.lifecycle.recover_topups(Duration::ZERO).await.unwrap(),
        0,
        "nothing left"
    );
    let (a, b) = tokio::join!(
        topup::apply(pg, redis, keys, recovery, t.id),
        topup::apply(pg, redis, keys, recovery, t.id)
    );
    assert!(a.unwrap() && b.unwrap(), "done before: complete");
    // A crash after the Redis step, before the top-up was marked done.
    sqlx::query("UPDATE stock_topups SET done_at = NULL WHERE id = $1")
        .bind(t.id)
        .execute(pg)
        .await
        .unwrap();
    let (a, b) = tokio::join!(
        topup::apply(pg, redis, keys, recovery, t.id),
        topup::apply(pg, redis, keys, recovery, t.id)
    );
    assert!(a.unwrap() && b.unwrap());
    assert_eq!(redis_stock(&app, &ns, v).await, Some(5), "added once");

    let accepted = sell(&app, v, 1..9).await;
    let (created, failed) = persisted(pg, v, accepted).await;
    assert_eq!((accepted, created, failed), (5, 5, 0));
    app.shutdown().await;
}
