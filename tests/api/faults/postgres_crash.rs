//! faults: `postgres_crashed_and_restarted_mid_sale_loses_nothing`.
use super::*;

/// Postgres crashes and comes back mid-sale: the API keeps accepting (it needs no
/// Postgres), the worker holds its messages and retries, nothing acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs root: runs a PostgreSQL cluster of its own (CI runs as root and includes it)"]
async fn postgres_crashed_and_restarted_mid_sale_loses_nothing() {
    require_root();
    let ns = Namespace::new().await;
    let pg = Arc::new(tokio::task::spawn_blocking(OwnPostgres::new).await.unwrap());
    let app = Arc::new(TestApp::builder(&ns).env("DATABASE_URL", pg.url()).spawn().await);
    let stock = 250;
    let v = app.flash_sale(stock).await;
    let tally = crowd(&app.addr, &app.jwt, app.pg(), v, 1..301, |landing| {
        let pg = pg.clone();
        async move {
            // Read from Postgres just before it crashes.
            landing.lands().await;
            tokio::task::spawn_blocking(move || pg.crash()).await.unwrap();
        }
    })
    .await;
    // Readiness is checked in the background once a second: the next check sees it.
    let down = eventually(Duration::from_secs(10), || async {
        let (_, ready) = app.get("/health/ready", None).await;
        (ready["checks"]["postgres"] == "down").then_some(())
    })
    .await;
    assert!(down.is_some(), "readiness names postgres down within 10 s");
    {
        let pg = pg.clone();
        tokio::task::spawn_blocking(move || pg.start()).await.unwrap();
    }
    let all = after_the_fault(
        "postgres crashed and restarted",
        &app.addr,
        &app.jwt,
        app.pg(),
        v,
        tally,
    )
    .await;
    settle("postgres crashed and restarted", &app, v, stock, &all).await;
    let ready = eventually(Duration::from_secs(10), || async {
        let (status, _) = app.get("/health/ready", None).await;
        (status == StatusCode::OK).then_some(())
    })
    .await;
    assert!(ready.is_some(), "ready again once Postgres is back");
}
