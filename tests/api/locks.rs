//! Issue 5: distributed locks against the real Redis.
use crate::helpers::*;
use seckill::lock::{fence, ReleaseError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SHORT_LEASE: [(&str, &str); 1] = [("SECKILL_LOCK_LEASE_MS", "600")];

async fn instance(ns: &Namespace) -> TestApp {
    TestApp::spawn_api_only(ns, &SHORT_LEASE).await
}

/// Two instances x 50 tasks, each an unprotected read-modify-write of one key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_of_fifty_tasks_each_are_mutually_excluded() {
    let ns = Namespace::new().await;
    let (a, b) = (instance(&ns).await, instance(&ns).await);
    let key = format!("{}:test:counter", ns.name);
    let mut tasks = Vec::new();
    for app in [&a, &b] {
        for _ in 0..50 {
            let locks = app.app().state().locks.clone();
            let key = key.clone();
            tasks.push(tokio::spawn(async move {
                let mut redis = redis::Client::open("redis://127.0.0.1:6379")
                    .unwrap()
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap();
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
    let locks = app.app().state().locks.clone();
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
    tokio::time::sleep(Duration::from_millis(400)).await;
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
    let held = a.app().state().locks.owner().lock("w").await.unwrap();
    tokio::time::sleep(Duration::from_millis(2000)).await; // more than three 600 ms leases
    let rival = b.app().state().locks.owner();
    assert!(
        rival.try_lock("w", Duration::ZERO, None).await.unwrap().is_none(),
        "still held"
    );
    assert!(!held.is_lost());
    // The holder's process dies: its watchdog stops, nobody releases.
    std::mem::forget(held);
    let died = Instant::now();
    a.crash().await;
    let got = rival.try_lock("w", Duration::from_secs(5), None).await.unwrap();
    assert!(got.is_some());
    let waited = died.elapsed();
    assert!(
        waited < Duration::from_millis(2000),
        "free within one lease (waited {waited:?})"
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
        .locks
        .owner()
        .try_lock("f", Duration::ZERO, Some(Duration::from_millis(150)))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let next = state
        .locks
        .owner()
        .try_lock("f", Duration::ZERO, None)
        .await
        .unwrap()
        .expect("the lease ran out");
    assert!(next.fence > stalled.fence);

    let key = format!("{}:test:fenced", ns.name);
    assert!(fence::set_redis(&state.redis, &state.keys, &key, next.fence, "new")
        .await
        .unwrap());
    assert!(
        !fence::set_redis(&state.redis, &state.keys, &key, stalled.fence, "stale")
            .await
            .unwrap()
    );
    let mut redis = app.redis().await;
    let v: String = redis::cmd("GET").arg(&key).query_async(&mut redis).await.unwrap();
    assert_eq!(v, "new");

    let mut tx = state.pg.begin().await.unwrap();
    assert!(fence::advance_pg(&mut tx, "row-1", next.fence).await.unwrap());
    tx.commit().await.unwrap();
    let mut tx = state.pg.begin().await.unwrap();
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
    let owner = a.app().state().locks.owner();
    let held = owner
        .try_lock("h", Duration::ZERO, Some(Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap();
    // A lock service of the test's own: the instance's background singletons also
    // take locks, and would be counted with ours.
    let state = b.app().state();
    let b_locks = seckill::lock::LockService::start(
        state.redis.clone(),
        state.keys.clone(),
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
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    held.release().await.unwrap().unwrap();
    let acquired = waiter.await.unwrap();
    let handover = acquired - released;
    // Woken by the release: its fallback nap (1 s, started ~100 ms before) would
    // have ended ~900 ms after the release.
    assert!(handover < Duration::from_millis(600), "hand-over took {handover:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_users_guarded_operations_run_one_after_the_other_across_instances() {
    let ns = Namespace::new().await;
    let (a, b) = (instance(&ns).await, instance(&ns).await);
    let log: Arc<std::sync::Mutex<Vec<(i64, Instant, Instant)>>> = Default::default();
    let mut tasks = Vec::new();
    for (i, app) in [&a, &b, &a, &b].into_iter().enumerate() {
        let user = if i < 2 { 1 } else { 2 };
        let serializer = app.app().state().user_serializer.clone();
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            serializer
                .run(user, async {
                    let start = Instant::now();
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    log.lock().unwrap().push((user, start, Instant::now()));
                    Ok(())
                })
                .await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let log = log.lock().unwrap().clone();
    let of = |u: i64| log.iter().filter(|e| e.0 == u).cloned().collect::<Vec<_>>();
    let (u1, u2) = (of(1), of(2));
    let overlap = |x: &(i64, Instant, Instant), y: &(i64, Instant, Instant)| x.1 < y.2 && y.1 < x.2;
    assert!(
        !overlap(&u1[0], &u1[1]),
        "one user's operations ran one after the other"
    );
    assert!(!overlap(&u2[0], &u2[1]));
    assert!(
        u1.iter().any(|x| u2.iter().any(|y| overlap(x, y))),
        "different users ran in parallel"
    );

    // Past the wait limit: 409 request_in_progress.
    let c = TestApp::spawn_api_only(&ns, &[("SECKILL_USER_LOCK_WAIT_MS", "100")]).await;
    let slow = tokio::spawn({
        let s = a.app().state().user_serializer.clone();
        async move {
            s.run(3, async {
                tokio::time::sleep(Duration::from_millis(800)).await;
                Ok(())
            })
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let err = c
        .app()
        .state()
        .user_serializer
        .run(3, async { Ok(()) })
        .await
        .unwrap_err();
    assert_eq!((err.status.as_u16(), err.code), (409, "request_in_progress"));
    slow.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_singleton_job_runs_on_one_instance_and_moves_when_it_dies() {
    let ns = Namespace::new().await;
    let (a, b) = (instance(&ns).await, instance(&ns).await);
    let runs: [Arc<AtomicU64>; 2] = [Arc::default(), Arc::default()];
    for (app, counter) in [(&a, runs[0].clone()), (&b, runs[1].clone())] {
        let locks = app.app().state().locks.clone();
        let stop = app.app().stop_token();
        tokio::spawn(async move {
            seckill::lock::singleton::run(locks, "sweeper", Duration::from_millis(50), stop, move || {
                let c = counter.clone();
                async move {
                    c.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                }
            })
            .await
        });
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (ra, rb) = (runs[0].load(Ordering::Relaxed), runs[1].load(Ordering::Relaxed));
    assert!((ra == 0) != (rb == 0), "exactly one instance runs it: {ra} / {rb}");
    let (holder, other, other_runs) = if ra > 0 {
        (a, b, runs[1].clone())
    } else {
        (b, a, runs[0].clone())
    };
    holder.crash().await;
    let died = Instant::now();
    let took_over = eventually(Duration::from_secs(5), || async {
        (other_runs.load(Ordering::Relaxed) > 0).then_some(died.elapsed())
    })
    .await;
    let waited = took_over.expect("another instance takes over");
    assert!(
        waited < Duration::from_millis(2500),
        "within about one lease: {waited:?}"
    );
    other.shutdown().await;
}
