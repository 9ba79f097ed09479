//! Distributed locks against the real Redis: mutual exclusion across instances,
//! reentrancy, the watchdog and leases, fencing tokens, waiters woken by a release
//! (one per release) or polling when they hear none,
//! per-user serialization of pay and cancel, and singleton jobs that move when their
//! instance dies.
use crate::helpers::*;
use seckill::http::ApiError;
use seckill::lock::{fence, ReleaseError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An API-only instance whose watchdog-kept locks have a 600 ms lease.
async fn instance(ns: &Namespace) -> TestApp {
    TestApp::builder(ns)
        .env("SECKILL_LOCK_LEASE_MS", "600")
        .api_only()
        .spawn()
        .await
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
    let key = app.app().state().keys.lock("e");
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
    let held = a.app().state().locks.owner().lock("w").await.unwrap();
    // Time passing is the subject: longer than three 600 ms leases, each renewed by
    // the watchdog alone.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let rival = b.app().state().locks.owner();
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
        .locks
        .owner()
        .try_lock("f", Duration::ZERO, Some(Duration::from_millis(150)))
        .await
        .unwrap()
        .unwrap();
    // The next holder waits for the stalled holder's lease to run out.
    let next = state
        .locks
        .owner()
        .try_lock("f", Duration::from_secs(5), None)
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
    let mut conn = state.redis.conn().await.unwrap();
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

/// N waiters of one lock in one process, the holder in another: each release wakes
/// one waiter, not all, so the queue drains with about two script calls per waiter
/// (its first refusal, its grant) and one wake-up per release, where waking all
/// would cost N(N+1)/2 of each. The lock stays exclusive all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_release_wakes_one_waiter_not_all() {
    const N: u64 = 30;
    let ns = Namespace::new().await;
    let (a, b) = (instance(&ns).await, instance(&ns).await);
    let held = a
        .app()
        .state()
        .locks
        .owner()
        .try_lock("q", Duration::ZERO, Some(Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    // A lock service of the test's own (the instance's singletons take locks too),
    // with a 30 s watchdog lease: a waiter's fallback nap is then 1 s, so polls
    // hardly add to the count.
    let state = b.app().state();
    let locks = seckill::lock::LockService::start(
        state.redis.clone(),
        state.keys.clone(),
        "waiters",
        Duration::from_secs(30),
        b.app().stop_token(),
    );
    let (attempts0, wakeups0) = (locks.attempts(), locks.wakeups());
    let holding = Arc::new(AtomicU64::new(0));
    let waiters: Vec<_> = (0..N)
        .map(|_| {
            let (locks, holding) = (locks.clone(), holding.clone());
            tokio::spawn(async move {
                let g = locks
                    .owner()
                    .try_lock("q", Duration::from_secs(60), None)
                    .await
                    .unwrap()
                    .expect("granted within the wait");
                assert_eq!(holding.fetch_add(1, Ordering::SeqCst), 0, "two holders at once");
                tokio::task::yield_now().await;
                holding.fetch_sub(1, Ordering::SeqCst);
                g.release().await.unwrap().unwrap();
            })
        })
        .collect();
    eventually(Duration::from_secs(10), || async {
        (locks.attempts() - attempts0 >= N).then_some(())
    })
    .await
    .expect("every waiter made its first attempt");
    let released = Instant::now();
    held.release().await.unwrap().unwrap();
    for w in waiters {
        w.await.unwrap();
    }
    let took = released.elapsed();
    let (attempts, wakeups) = (locks.attempts() - attempts0, locks.wakeups() - wakeups0);
    println!("{N} waiters: {attempts} attempts, {wakeups} wake-ups, drained in {took:?}");
    // At most one wake-up per release this process heard: the holder's and the N
    // waiters' (the last of which finds no one waiting).
    assert!(wakeups <= N + 1, "{wakeups} wake-ups for {} releases", N + 1);
    // A first attempt and a grant each, a few wake-ups lost to a race, and the
    // waiters' fallback polls (each at most one a second) on a slow machine.
    let bound = 3 * N + N * took.as_secs();
    assert!(attempts <= bound, "{attempts} attempts (at most {bound})");
}

/// A waiter that hears no release (its process follows none: a lost message, a
/// subscription down) still gets the lock within its wait once it is free: a
/// wake-up only shortens waiting, the waiter polls with what is left of its wait.
#[tokio::test]
async fn a_waiter_that_hears_no_release_still_gets_the_lock_within_its_wait() {
    let ns = Namespace::new().await;
    let (a, b) = (instance(&ns).await, instance(&ns).await);
    let held = a
        .app()
        .state()
        .locks
        .owner()
        .try_lock("deaf", Duration::ZERO, Some(Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    let state = b.app().state();
    // Without follow_releases: no wake-up ever comes.
    let deaf = seckill::lock::LockService::new(
        state.redis.clone(),
        state.keys.clone(),
        "deaf",
        Duration::from_secs(30),
        b.app().stop_token(),
    );
    let waiter = tokio::spawn({
        let deaf = deaf.clone();
        async move { deaf.owner().try_lock("deaf", Duration::from_secs(3), None).await }
    });
    eventually(Duration::from_secs(5), || async { (deaf.attempts() > 0).then_some(()) })
        .await
        .expect("the waiter is refused once");
    held.release().await.unwrap().unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the wait ends")
        .unwrap()
        .unwrap();
    assert!(got.is_some(), "the free lock was taken within the 3 s wait");
    assert_eq!(deaf.wakeups(), 0);
    got.unwrap().release().await.unwrap().unwrap();
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
                    // Work that takes a while, so that overlaps (or their absence) show.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    log.lock().unwrap().push((user, start, Instant::now()));
                    Ok::<_, ApiError>(())
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

    // Past the wait limit: 409 request_in_progress. The slow operation holds user 3's
    // lock until the test is done with it.
    let c = TestApp::builder(&ns)
        .env("SECKILL_USER_LOCK_WAIT_MS", "100")
        .api_only()
        .spawn()
        .await;
    let (running, is_running) = tokio::sync::oneshot::channel();
    let (finish, may_finish) = tokio::sync::oneshot::channel::<()>();
    let slow = tokio::spawn({
        let s = a.app().state().user_serializer.clone();
        async move {
            s.run(3, async move {
                running.send(()).unwrap();
                let _ = may_finish.await;
                Ok::<_, ApiError>(())
            })
            .await
        }
    });
    is_running.await.expect("the slow operation runs");
    let err: ApiError = c
        .app()
        .state()
        .user_serializer
        .run(3, async { Ok(()) })
        .await
        .unwrap_err();
    assert_eq!((err.status.as_u16(), err.code), (409, "request_in_progress"));
    finish.send(()).unwrap();
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
    // More rounds (50 ms apart) than fit in one 600 ms lease: the holder kept the
    // lock past its lease while the other instance contended for it.
    let rounds = || runs[0].load(Ordering::Relaxed) + runs[1].load(Ordering::Relaxed);
    eventually(Duration::from_secs(10), || async { (rounds() >= 20).then_some(()) })
        .await
        .expect("the job runs");
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
    // The contender waits for the key's expiry (at most one 600 ms lease after the
    // last renewal) and runs a round at once. Half a lease of slack for a loaded
    // machine: a lease kept twice as long (1200 ms) fails.
    println!("singleton job taken over {waited:?} after its holder died");
    assert!(
        waited < Duration::from_millis(900),
        "within one lease of 600 ms: {waited:?}"
    );
    other.shutdown().await;
}
