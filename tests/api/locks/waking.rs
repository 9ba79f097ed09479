//! locks: `each_release_wakes_one_waiter_not_all`,
//! `a_waiter_that_hears_no_release_still_gets_the_lock_within_its_wait`,
//! `one_users_guarded_operations_run_one_after_the_other_across_instances`,
//! `a_singleton_job_runs_on_one_instance_and_moves_when_it_dies`.
use super::*;

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
        .handles
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
    let locks = seckill::locks::LockService::start(
        state.handles.redis.clone(),
        state.handles.keys.clone(),
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
        .handles
        .locks
        .owner()
        .try_lock("deaf", Duration::ZERO, Some(Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    let state = b.app().state();
    // Without follow_releases: no wake-up ever comes.
    let deaf = seckill::locks::LockService::new(
        state.handles.redis.clone(),
        state.handles.keys.clone(),
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
        let serializer = app.app().state().ordering.user_serializer.clone();
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
        let s = a.app().state().ordering.user_serializer.clone();
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
        .ordering
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
        let locks = app.app().state().handles.locks.clone();
        let stop = app.app().stop_token();
        tokio::spawn(async move {
            seckill::locks::singleton::run(locks, "sweeper", Duration::from_millis(50), stop, move || {
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
