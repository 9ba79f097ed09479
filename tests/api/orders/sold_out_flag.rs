//! orders: `a_sold_out_sale_costs_redis_at_most_one_request_a_second`,
//! `a_resubscribed_cache_keeps_its_sold_out_flags`.
use super::*;

/// While a sale stays sold out, however many requests arrive at once, an instance
/// sends Redis at most one order request per voucher per second: the one whose
/// answer renews the flag. Exact, not a rate seen on a quiet machine: the k-th
/// probe can leave only k seconds after the flag was set (each re-stamps it before
/// it goes), so a loaded machine makes fewer calls, never more.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sold_out_sale_costs_redis_at_most_one_request_a_second() {
    let ns = Namespace::new().await;
    let (app, quiet, v, flagged) = sold_out_on_a_quiet_instance(&ns).await;
    let before = reserve_calls(&quiet).await;
    let mut answered = 0;
    // Bursts of concurrent requests for 2.5 s: the flag's trust runs out twice.
    let bursts = std::time::Instant::now();
    while bursts.elapsed() < Duration::from_millis(2500) {
        let burst = join_all((0..16).map(|i| quiet.order(v, 100 + i))).await;
        for (status, body) in burst {
            assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "sold_out"), "{body}");
        }
        answered += 16;
    }
    let calls = reserve_calls(&quiet).await - before;
    // Read after the count: every call counted left before this instant.
    let since_flag = flagged.elapsed();
    println!("{calls} Redis calls for {answered} sold-out requests, {since_flag:?} after the flag was set");
    assert!(
        calls >= 1,
        "the flag is checked with Redis again once its trust ran out"
    );
    assert!(
        calls <= since_flag.as_secs(),
        "{calls} Redis calls for {answered} sold-out requests in {since_flag:?} since the flag was set: more than one a second"
    );
    quiet.shutdown().await;
    app.shutdown().await;
}

/// The cache's subscription to the voucher events drops and comes back (a Redis
/// restart, a network blip; and at every start, where the first subscription comes
/// just after the instance began serving). The reload that follows keeps the
/// sold-out flags: a stock event missed meanwhile is covered by the flag's
/// `SOLD_OUT_TTL`, like any lost event. It used to clear them, and the next request
/// went to Redis however recently the flag was renewed: a whole burst of a sold-out
/// crowd once (18 calls in 2.5 s, when a loaded machine delayed the first
/// subscription past the sell-out). Three resubscriptions under a steady stream of
/// orders; no two order-script calls less than `SOLD_OUT_TTL` apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resubscribed_cache_keeps_its_sold_out_flags() {
    let ns = Namespace::new().await;
    // A server of the test's own: the test drops every subscriber on it.
    let redis = OwnRedis::snapshots_only();
    let app = TestApp::builder(&ns).env("REDIS_URL", redis.url()).spawn().await;
    let v = app.flash_sale(1).await;
    let quiet = TestApp::builder(&ns)
        .env("REDIS_URL", redis.url())
        .api_only()
        .spawn()
        .await;
    assert_eq!(quiet.order(v, 1).await.0, StatusCode::ACCEPTED);
    let mut stream = SoldOutStream::new(&quiet, v).await;
    stream.order().await;
    assert_eq!(stream.calls.len(), 1, "Redis said sold out: the flag is set");
    for _ in 0..3 {
        // Only a reload that read Postgres after this brings it into the cache.
        let marker = voucher_without_an_event(&app).await;
        let killed = redis.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]).unwrap_or_default();
        assert!(
            killed.trim().parse::<u32>().unwrap_or(0) >= 1,
            "subscribers dropped: {killed}"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while code(&quiet.order(marker, 1).await.1) != "not_a_flash_sale" {
            assert!(
                Instant::now() < deadline,
                "no reload within 10 s of the subscription dropping"
            );
            stream.order().await;
        }
        for _ in 0..20 {
            stream.order().await;
        }
    }
    // And on, until the flag's trust ran out at least once since.
    let until = Instant::now() + SOLD_OUT_TTL + Duration::from_millis(200);
    while Instant::now() < until {
        stream.order().await;
    }
    let calls = &stream.calls;
    // Each call's interval in milliseconds since the order that set the flag was sent.
    let ms = |t: Instant| t.duration_since(calls[0].0).as_millis();
    let log: Vec<String> = calls.iter().map(|&(a, b)| format!("{}..{}", ms(a), ms(b))).collect();
    println!(
        "{} order-script calls for {} sold-out orders, at ms {log:?}",
        calls.len(),
        stream.sent
    );
    assert!(
        calls.len() >= 2,
        "the flag is checked with Redis again once its trust ran out"
    );
    for pair in calls.windows(2) {
        // The flag's clock counts whole milliseconds.
        let at_most = pair[1].1 - pair[0].0;
        assert!(
            at_most >= SOLD_OUT_TTL - Duration::from_millis(1),
            "two order-script calls at most {at_most:?} apart while the sale was sold out (at ms {log:?})"
        );
    }
    quiet.shutdown().await;
    app.shutdown().await;
}
