//! pipeline: `a_newer_writer_writes_the_older_format_while_an_older_reader_lives`,
//! `an_older_process_is_refused_once_the_newer_format_is_decided`,
//! `a_crashed_older_process_holds_the_format_back_until_declared_gone`,
//! `an_older_relay_parks_what_it_cannot_read_for_a_newer_one`.
//!
//! A rolling upgrade runs older and newer processes on one outbox. Here the older
//! one is this binary with `SECKILL_OUTBOX_FORMAT=1` (it reads and writes format 1
//! only, as the version before stamped formats did) and the newer one this binary
//! as built (format 2: entries stamped with field `f`). Nothing acknowledged is
//! lost in either order of start, and no process writes a format that a live,
//! announced process cannot read (src/ordering/outbox/format.rs).
use super::*;
use seckill::app::Application;
use seckill::config::Settings;
use seckill::ordering::outbox::format::{EVERY, NEWEST};

/// The format writers may write, as recorded.
async fn decision(app: &TestApp) -> i32 {
    sqlx::query_scalar("SELECT writes FROM outbox_format")
        .fetch_one(app.pg())
        .await
        .unwrap()
}

/// The announced processes: (process, reads).
async fn announced(app: &TestApp) -> Vec<(String, i32)> {
    sqlx::query_as("SELECT process, reads FROM outbox_processes ORDER BY process")
        .fetch_all(app.pg())
        .await
        .unwrap()
}

/// Returns once the process that announced `reads` renewed its announcement
/// twice after making it: its fence ran two rounds (each of which tries to raise
/// the decision when the process reads more than is decided).
async fn two_rounds_of(app: &TestApp, process: &str) {
    let renewed = eventually(Duration::from_secs(20), || async {
        let (started, seen): (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>) =
            sqlx::query_as("SELECT started_at, seen_at FROM outbox_processes WHERE process = $1")
                .bind(process)
                .fetch_one(app.pg())
                .await
                .unwrap();
        (seen - started >= chrono::Duration::from_std(2 * EVERY).unwrap()).then_some(())
    })
    .await;
    assert!(renewed.is_some(), "{process} ran two rounds of its fence within 20 s");
}

/// The process `app` announced itself as.
fn process_of(app: &TestApp) -> String {
    app.app().state().recovery.formats.process().to_owned()
}

/// Every entry now in `v`'s (one-shard) outbox: its field `f`, if any.
async fn stamps(app: &TestApp, ns: &Namespace, v: i64) -> Vec<Option<String>> {
    let mut conn = app.redis().await;
    let r: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(ns.keys().outbox(v))
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap();
    r.ids.iter().map(|e| e.get::<String>("f")).collect()
}

/// `seckill outbox-formats ARGS` on the namespace: whether it succeeded, its output.
fn cli(ns: &Namespace, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_seckill"))
        .arg("outbox-formats")
        .args(args)
        .envs(ns.vars.iter())
        .output()
        .expect("run seckill outbox-formats");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

const UNREADABLE: &str = "seckill_worker_incidents_total{kind=\"unreadable_outbox_entry\"}";

/// The older process first, the newer one joining it (a rolling upgrade's
/// overlap): the newer writes format 1 for as long as the older is announced,
/// so the older relay, the only one running, reads every order the newer
/// accepted. Once the older stops, the newer writes format 2, and a newer relay
/// publishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_writer_writes_the_older_format_while_an_older_reader_lives() {
    let ns = Namespace::new().await;
    let old = TestApp::builder(&ns).env("SECKILL_OUTBOX_FORMAT", "1").spawn().await;
    let new = TestApp::builder(&ns).api_only().spawn().await;
    let v = old.flash_sale(1000).await;
    two_rounds_of(&new, &process_of(&new)).await;
    assert_eq!(
        decision(&new).await,
        1,
        "not raised while a reader of format 1 is announced"
    );
    assert_eq!(new.metric("seckill_outbox_format_written").await, 1.0);
    // A crowd through both: the older relay, the only one, reads all of it.
    let mut answers = Vec::new();
    for chunk in (1..=200i64).collect::<Vec<_>>().chunks(50) {
        let calls = chunk.iter().map(|&u| {
            let app = if u % 2 == 0 { &old } else { &new };
            async move { (u, app.order(v, u).await) }
        });
        answers.extend(futures::future::join_all(calls).await);
    }
    assert!(
        answers.iter().all(|(_, (s, _))| *s == StatusCode::ACCEPTED),
        "every order accepted: {:?}",
        answers.iter().find(|(_, (s, _))| *s != StatusCode::ACCEPTED)
    );
    wait_stored(&old, v, 200, Duration::from_secs(60), "the crowd through both").await;
    assert_eq!(
        old.metric(UNREADABLE).await,
        0.0,
        "the older relay met nothing it cannot read"
    );
    assert_eq!(decision(&new).await, 1);
    // The older process stops (and takes its announcement away): the newer one
    // raises the format.
    old.shutdown().await;
    let raised = eventually(Duration::from_secs(20), || async {
        (new.metric("seckill_outbox_format_written").await == NEWEST as f64).then_some(())
    })
    .await;
    assert!(raised.is_some(), "the newer process writes format {NEWEST} once alone");
    assert_eq!(decision(&new).await, NEWEST as i32);
    for u in 201..=230 {
        assert_eq!(new.order(v, u).await.0, StatusCode::ACCEPTED);
    }
    // No relay runs: the entries wait in the outbox, stamped.
    let after = stamps(&new, &ns, v).await;
    assert!(
        !after.is_empty() && after.iter().all(|f| f.as_deref() == Some("2")),
        "the entries written after the raise are format 2: {after:?}"
    );
    let relay = TestApp::spawn(&ns).await;
    wait_stored(
        &relay,
        v,
        230,
        Duration::from_secs(60),
        "format-2 entries by a newer relay",
    )
    .await;
    assert_eq!(relay.metric(UNREADABLE).await, 0.0);
    assert_eq!(stored_orders(&relay, v).await, Some(230), "each order once");
    relay.shutdown().await;
    new.shutdown().await;
}

/// The newer process first: it raises the format at once. An older process
/// started afterwards (a crashed pod of the old version restarted during the
/// rollout) is refused before it reads or writes anything, and nothing the
/// newer one accepted waits on it. Lowering the format is refused while the
/// newer process is announced, and allowed once it stopped (a rollback), after
/// which the older process starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_process_is_refused_once_the_newer_format_is_decided() {
    let ns = Namespace::new().await;
    let new = TestApp::spawn(&ns).await;
    let v = new.flash_sale(100).await;
    let raised = eventually(Duration::from_secs(20), || async {
        (decision(&new).await == NEWEST as i32).then_some(())
    })
    .await;
    assert!(raised.is_some(), "the newer process, alone, raised the format");
    for u in 1..=40 {
        assert_eq!(new.order(v, u).await.0, StatusCode::ACCEPTED);
    }
    let mut vars = ns.vars.clone();
    vars.insert("SECKILL_OUTBOX_FORMAT".into(), "1".into());
    let settings = Settings::from_map(&vars).unwrap();
    let refused = match Application::build(settings, Mode::Serve).await {
        Ok(_) => panic!("an older process started while format {NEWEST} is written"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        refused.contains("outbox format 2 is being written") && refused.contains("reads formats up to 1"),
        "{refused}"
    );
    assert_eq!(
        announced(&new).await.len(),
        1,
        "the refused process never announced itself"
    );
    wait_stored(&new, v, 40, Duration::from_secs(60), "the newer process's orders").await;
    assert_eq!(new.metric(UNREADABLE).await, 0.0);
    // A rollback: refused while the newer process is announced...
    let (ok, out) = cli(&ns, &["lower", "--to", "1"]);
    assert!(!ok && out.contains(&process_of(&new)), "{out}");
    assert_eq!(decision(&new).await, NEWEST as i32);
    // ...done once it stopped: then the older process starts.
    new.shutdown().await;
    let (ok, out) = cli(&ns, &["lower", "--to", "1"]);
    assert!(ok, "{out}");
    let old = TestApp::builder(&ns).env("SECKILL_OUTBOX_FORMAT", "1").spawn().await;
    assert_eq!(decision(&old).await, 1);
    assert_eq!(announced(&old).await, vec![(process_of(&old), 1)]);
    assert_eq!(old.order(v, 41).await.0, StatusCode::ACCEPTED);
    wait_stored(&old, v, 41, Duration::from_secs(60), "after the rollback").await;
    old.shutdown().await;
}

/// An older process that crashed keeps its announcement: no timeout forgets it,
/// so the format stays where it can read it (its entries may still be pending).
/// The operator declares it gone; then the newer process raises the format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_older_process_holds_the_format_back_until_declared_gone() {
    let ns = Namespace::new().await;
    let old = TestApp::builder(&ns)
        .env("SECKILL_OUTBOX_FORMAT", "1")
        .api_only()
        .spawn()
        .await;
    let v = old.flash_sale(100).await;
    for u in 1..=10 {
        assert_eq!(old.order(v, u).await.0, StatusCode::ACCEPTED);
    }
    let gone = process_of(&old);
    old.crash().await;
    let new = TestApp::spawn(&ns).await;
    // The older process's orders, format 1, are relayed by the newer process.
    wait_stored(&new, v, 10, Duration::from_secs(60), "the crashed process's orders").await;
    two_rounds_of(&new, &process_of(&new)).await;
    assert_eq!(
        decision(&new).await,
        1,
        "held back by the crashed process's announcement"
    );
    assert_eq!(new.metric("seckill_outbox_format_written").await, 1.0);
    let (ok, out) = cli(&ns, &[]);
    assert!(
        ok && out.contains(&gone) && out.contains("writers write outbox format 1"),
        "{out}"
    );
    // It crashed seconds ago: it looks alive, and is forgotten only on purpose.
    let (ok, out) = cli(&ns, &["forget", &gone]);
    assert!(!ok && out.contains("looks alive"), "{out}");
    let (ok, out) = cli(&ns, &["forget", &gone, "--force"]);
    assert!(ok, "{out}");
    let (ok, out) = cli(&ns, &["forget", &gone, "--force"]);
    assert!(!ok && out.contains("no process"), "{out}");
    let raised = eventually(Duration::from_secs(20), || async {
        (new.metric("seckill_outbox_format_written").await == NEWEST as f64).then_some(())
    })
    .await;
    assert!(
        raised.is_some(),
        "the format raised once the crashed process was declared gone"
    );
    for u in 11..=20 {
        assert_eq!(new.order(v, u).await.0, StatusCode::ACCEPTED);
    }
    wait_stored(&new, v, 20, Duration::from_secs(60), "format-2 orders").await;
    assert_eq!(new.metric(UNREADABLE).await, 0.0);
    new.shutdown().await;
}

/// Should an older relay meet newer entries anyway (here the decision is set by
/// hand past what it reads, as a process declared gone while alive would see),
/// it parks them, counted, never acknowledged; a newer relay claims and
/// publishes them, each order once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_relay_parks_what_it_cannot_read_for_a_newer_one() {
    let ns = Namespace::new().await;
    let old = TestApp::builder(&ns)
        .env("SECKILL_OUTBOX_FORMAT", "1")
        .mode(Mode::Serve)
        .forces_incidents(&["unreadable_outbox_entry"])
        .spawn()
        .await;
    let writer = TestApp::builder(&ns).api_only().spawn().await;
    let v = old.flash_sale(100).await;
    sqlx::query("UPDATE outbox_format SET writes = 2, decided_by = 'the test'")
        .execute(old.pg())
        .await
        .unwrap();
    let stamped = eventually(Duration::from_secs(20), || async {
        (writer.metric("seckill_outbox_format_written").await == 2.0).then_some(())
    })
    .await;
    assert!(stamped.is_some(), "the writer took the decision");
    for u in 1..=20 {
        assert_eq!(writer.order(v, u).await.0, StatusCode::ACCEPTED);
    }
    let parked = eventually(Duration::from_secs(20), || async {
        (old.metric(UNREADABLE).await >= 1.0).then_some(())
    })
    .await;
    assert!(parked.is_some(), "the older relay met the entries and counted them");
    assert_eq!(stored_orders(&old, v).await.unwrap_or(0), 0, "nothing published by it");
    assert!(
        stamps(&old, &ns, v).await.iter().all(|f| f.as_deref() == Some("2")),
        "the entries stay in the outbox"
    );
    let newer = TestApp::builder(&ns)
        .env("SECKILL_RELAY_CLAIM_IDLE_MS", "300")
        .spawn()
        .await;
    wait_stored(
        &newer,
        v,
        20,
        Duration::from_secs(60),
        "parked entries by a newer relay",
    )
    .await;
    assert_eq!(stored_orders(&newer, v).await, Some(20), "each order once");
    newer.shutdown().await;
    writer.shutdown().await;
    old.shutdown().await;
}
