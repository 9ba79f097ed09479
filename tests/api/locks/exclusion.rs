//! locks: `two_instances_of_fifty_tasks_each_are_mutually_excluded`,
//! `reentrant_owner_and_refused_or_reported_releases`,
//! `the_watchdog_keeps_a_lock_past_three_leases_and_a_dead_holder_loses_it_within_one`,
//! `a_stalled_holders_late_write_is_refused_by_its_fencing_token`,
//! `a_waiter_wakes_on_release_and_waiting_issues_few_commands`.
use super::*;

/// Two instances x 50 tasks, each an unprotected read-modify-write of one key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_of_fifty_tasks_each_are_mutually_excluded() {
    let ns = Namespace::new().await;
    let (a, b) = (instance(&ns).await, instance(&ns).await);
    let key = format!("{}:test:counter", ns.name);
    let mut tasks = Vec::new();
    for app in [&a, &b] {
        for _ in 0..50 {
            let locks = app.app().state().handles.locks.clone();
            let key = key.clone();
            tasks.push(tokio::spawn(async move {
                let mut redis = test_redis().conn().await.unwrap();
                let guard = locks.owner().lock("counter").await.unwrap();
                let v: Option<i64> = redis::cmd("GET").arg(&key).query_async(&mut redis).await.unwrap();
                tokio::task::yield_now().await;
                let _: () = redis::cmd("SET")
                    .arg(&key)
                    .arg(v.unwrap_or(0) + 1)
                    .query_async(&mut redis)
                    .await
                    .unwrap();
                guard.release().await.unwrap().unwrap();
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut redis = a.redis().await;
    let v: i64 = redis::cmd("GET").arg(&key).query_async(&mut redis).await.unwrap();
    assert_eq!(v, 100);
}

#[tokio::test]
async fn reentrant_owner_and_refused_or_reported_releases() {
    let ns = Namespace::new().await;
    let app = instance(&ns).await;
    let locks = app.app().state().handles.locks.clone();
    let (me, other) = (locks.owner(), locks.owner());
    let outer = me.try_lock("r", Duration::ZERO, None).await.unwrap().expect("free");
    let inner = me
        .try_lock("r", Duration::ZERO, None)
        .await
        .unwrap()
        .expect("reentrant");
    assert_eq!(outer.fence, inner.fence, "re-entering keeps the grant's token");
    assert!(other.try_lock("r", Duration::ZERO, None).await.unwrap().is_none());
    assert_eq!(
        other.unlock("r").await.unwrap(),
        Err(ReleaseError::NotOwner),
        "a non-owner's release is refused"
    );
    inner.release().await.unwrap().unwrap();
    assert!(
        other.try_lock("r", Duration::ZERO, None).await.unwrap().is_none(),
        "held until the last release"
    );
    let outer_token = outer.fence;
    outer.release().await.unwrap().unwrap();
    let next = other
        .try_lock("r", Duration::ZERO, None)
        .await
        .unwrap()
        .expect("free after as many releases");
    assert!(next.fence > outer_token, "a new grant has a larger token");
    next.release().await.unwrap().unwrap();

    let short = me
        .try_lock("e", Duration::ZERO, Some(Duration::from_millis(150)))
        .await
        .unwrap()
        .unwrap();
    let key = app.app().state().handles.keys.lock("e");
    let redis = app.redis().await;
    eventually(Duration::from_secs(5), || {
        let (mut redis, key) = (redis.clone(), key.clone());
        async move {
            let exists: i64 = redis::cmd("EXISTS").arg(&key).query_async(&mut redis).await.ok()?;
            (exists == 0).then_some(())
        }
    })
    .await
    .expect("the 150 ms lease runs out");
    assert_eq!(
        short.release().await.unwrap(),
        Err(ReleaseError::Expired),
        "an expired lock's release is reported"
    );
}

#[tokio::test]
async fn the_watchdog_keeps_a_lock_past_three_leases_and_a_dead_holder_loses_it_within_one() {
    let ns = Namespace::new().await;
    let (a, b) = (instance(&ns).await, instance(&ns).await);
    let held = a.app().state().handles.locks.owner().lock("w").await.unwrap();
    // Time passing is the subject: longer than three 600 ms leases, each renewed by
    // the watchdog alone.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let rival = b.app().state().handles.locks.owner();
    assert!(
        rival.try_lock("w", Duration::ZERO, None).await.unwrap().is_none(),
        "still held"
    );
    assert!(!held.is_lost());
    // The holder's process dies: its watchdog stops, nobody releases.
    std::mem::forget(held);
    a.crash().await;
    let died = Instant::now();
    let got = rival.try_lock("w", Duration::from_secs(5), None).await.unwrap();
    assert!(got.is_some());
    let waited = died.elapsed();
    // The last renewal left at most one lease (600 ms); the waiter naps until the
    // key's own expiry. Half a lease of slack for a loaded machine: a lease kept
    // twice as long (1200 ms) fails.
    println!("a dead holder's lock taken {waited:?} after it died");
    assert!(
        waited < Duration::from_millis(900),
        "free within one lease of 600 ms (waited {waited:?})"
    );
}

/// A holder stalls past its lease; the next holder writes; the stalled holder's late
/// write is refused by the fencing check, in Redis and in Postgres.
#[tokio::test]
async fn a_stalled_holders_late_write_is_refused_by_its_fencing_token() {
    let ns = Namespace::new().await;
    let app = instance(&ns).await;
    let state = app.app().state();
    let stalled = state
        .handles
        .locks
        .owner()
        .try_lock("f", Duration::ZERO, Some(Duration::from_millis(150)))
        .await
        .unwrap()
        .unwrap();
    // The next holder waits for the stalled holder's lease to run out.
    let next = state
        .handles
        .locks
        .owner()
        .try_lock("f", Duration::from_secs(5), None)
        .await
        .unwrap()
        .expect("the lease ran out");
    assert!(next.fence > stalled.fence);

    let key = format!("{}:test:fenced", ns.name);
    assert!(
        fence::set_redis(&state.handles.redis, &state.handles.keys, &key, next.fence, "new")
            .await
            .unwrap()
    );
    assert!(
        !fence::set_redis(&state.handles.redis, &state.handles.keys, &key, stalled.fence, "stale")
            .await
            .unwrap()
    );
    let mut redis = app.redis().await;
    let v: String = redis::cmd("GET").arg(&key).query_async(&mut redis).await.unwrap();
    assert_eq!(v, "new");

    let mut tx = state.handles.pg.begin().await.unwrap();
    assert!(fence::advance_pg(&mut tx, "row-1", next.fence).await.unwrap());
    tx.commit().await.unwrap();
    let mut tx = state.handles.pg.begin().await.unwrap();
    assert!(!fence::advance_pg(&mut tx, "row-1", stalled.fence).await.unwrap());
    tx.rollback().await.unwrap();
    next.release().await.unwrap().unwrap();
}

#[tokio::test]
async fn a_waiter_wakes_on_release_and_waiting_issues_few_commands() {
    let ns = Namespace::new().await;
    let (a, b) = (instance(&ns).await, instance(&ns).await);
    // A waiter naps until the holder's lease would run out (at most 1 s) unless a
    // release wakes it: with a 10 s lease, a 2 s wait is an attempt and two or three retries.
    let owner = a.app().state().handles.locks.owner();
    let held = owner
        .try_lock("h", Duration::ZERO, Some(Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap();
    // A lock service of the test's own: the instance's background singletons also
    // take locks, and would be counted with ours.
    let state = b.app().state();
    let b_locks = seckill::locks::LockService::start(
        state.handles.redis.clone(),
        state.handles.keys.clone(),
        "waiter",
        Duration::from_millis(600),
        b.app().stop_token(),
    );
    let before = b_locks.attempts();
    let none = b_locks
        .owner()
        .try_lock("h", Duration::from_secs(2), None)
        .await
        .unwrap();
    assert!(none.is_none());
    let attempts = b_locks.attempts() - before;
    assert!(attempts <= 4, "a 2 s wait made {attempts} attempts");

    let before = b_locks.attempts();
    let waiter = tokio::spawn({
        let locks = b_locks.clone();
        async move {
            let g = locks
                .owner()
                .try_lock("h", Duration::from_secs(10), None)
                .await
                .unwrap()
                .unwrap();
            let at = Instant::now();
            g.release().await.unwrap().unwrap();
            at
        }
    });
    // Until the waiter has been refused once: its first attempt is counted (on this
    // one-thread runtime, only once its script is queued on the instance's Redis
    // connection), and a PING queued behind it on that connection is answered.
    eventually(Duration::from_secs(5), || async {
        (b_locks.attempts() > before).then_some(())
    })
    .await
    .expect("the waiter makes its first attempt");
    let mut conn = state.handles.redis.conn().await.unwrap();
    let _: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    let released = Instant::now();
    held.release().await.unwrap().unwrap();
    let acquired = waiter.await.unwrap();
    let handover = acquired - released;
    let attempts = b_locks.attempts() - before;
    assert!(attempts >= 2, "refused, then granted: {attempts} attempts");
    // Woken by the release: its fallback nap (1 s from its refusal, just before the
    // release) would have ended about a second after it.
    assert!(handover < Duration::from_millis(600), "hand-over took {handover:?}");
}
