//! rollback: `counters_never_reissue_after_a_restore`.
use super::*;

/// Business numbers and order ids handed out after the snapshot are not handed out
/// again by the restored Redis (its counter and its ceiling both went back, and both
/// look valid).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counters_never_reissue_after_a_restore() {
    let ns = Namespace::new().await;
    let mut redis = OwnRedis::snapshots_only();
    let url = redis.url();
    let app = TestApp::builder(&ns)
        .env("REDIS_URL", &url)
        .env("SECKILL_ID_BLOCK", "3")
        // Orders of the wave after the snapshot that no relay read before the crash
        // are admitted again from this process's memory, each an incident.
        .forces_incidents(&["rescued_order"])
        .spawn()
        .await;
    let v = app.flash_sale(100).await;
    let mut issued: Vec<String> = numbers(&app, 9, 3).await.unwrap();
    let mut ids: Vec<i64> = accepted(&wave(&app, v, 1..=5).await).into_values().collect();
    assert_eq!(ids.len(), 5);
    redis.snapshot();
    issued.extend(numbers(&app, 9, 4).await.unwrap());
    ids.extend(accepted(&wave(&app, v, 6..=12).await).into_values());
    assert_eq!(ids.len(), 12, "ids drawn after the snapshot (blocks of 3)");
    redis.crash_and_restart();
    let after = eventually(Duration::from_secs(60), || async { numbers(&app, 9, 5).await })
        .await
        .expect("numbers again after the restore");
    issued.extend(after);
    selling_again(&app, v, 13).await;
    // Compared with something: the waves after the restore were accepted (ids
    // drawn from the restored counter), and numbers were issued after it.
    let later = accepted(&wave(&app, v, 14..=30).await);
    assert_eq!(later.len(), 17, "every shopper after the restore got an id");
    ids.extend(later.into_values());
    assert_eq!(issued.len(), 12);
    let distinct: HashSet<&String> = issued.iter().collect();
    assert_eq!(
        distinct.len(),
        issued.len(),
        "a business number issued twice: {issued:?}"
    );
    let distinct: HashSet<i64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "an order id issued twice");
}
