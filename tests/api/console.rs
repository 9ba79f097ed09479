//! The admin console (`GET /admin/`): served with a strict Content-Security-Policy
//! and cache headers that cannot serve an old script, and, in headless Chromium
//! (`tests/browser/console.mjs`), showing a running sale whose numbers move while
//! orders come in. The browser test keeps a screenshot at `target/admin-console.png`
//! (and `target/admin-console-narrow.png`, a 380 px window); another
//! (`tests/browser/admission.mjs`) its admission panel over a queue and a raffle.
use crate::helpers::*;
use reqwest::{header, StatusCode};
use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

#[tokio::test]
async fn the_console_is_served_with_a_strict_policy_and_fresh_assets() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let page = app.client.get(format!("{}/admin/", app.addr)).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let headers = page.headers().clone();
    assert!(headers[header::CONTENT_TYPE].to_str().unwrap().starts_with("text/html"));
    let csp = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "{directive} missing from {csp}");
    }
    assert!(!csp.contains("unsafe"), "{csp}");
    assert_eq!(headers[header::CACHE_CONTROL], "no-cache");
    let html = page.text().await.unwrap();
    // No inline script or style for the policy to allow.
    assert_eq!(html.matches("<script").count(), html.matches("<script src=").count());
    assert!(!html.contains("<style") && !html.contains(" style="));
    let js = html
        .split('"')
        .find(|s| s.starts_with("/admin/console.js?v="))
        .expect("a versioned script")
        .to_owned();
    let asset = app.client.get(format!("{}{js}", app.addr)).send().await.unwrap();
    assert_eq!(asset.status(), StatusCode::OK);
    assert!(asset.headers()[header::CACHE_CONTROL]
        .to_str()
        .unwrap()
        .contains("immutable"));
    assert!(asset.text().await.unwrap().contains("sessionStorage"));
    let stale = app
        .client
        .get(format!("{}/admin/console.js?v=old", app.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(stale.headers()[header::CACHE_CONTROL], "no-cache");

    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let bare = no_redirects.get(format!("{}/admin", app.addr)).send().await.unwrap();
    assert_eq!(bare.status(), StatusCode::PERMANENT_REDIRECT);
    assert_eq!(bare.headers()[header::LOCATION], "/admin/");
    app.shutdown().await;
}

/// Fails, saying what is missing, where Chromium or Node is not installed
/// (`scripts/services.sh` installs both).
#[tokio::test]
async fn the_console_shows_a_running_sale_live() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert!(
        Path::new("/usr/bin/chromium").exists(),
        "the browser test needs /usr/bin/chromium: run scripts/services.sh (installs the Debian package chromium)"
    );
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let (stock, waves, per_wave) = (100, 3, 10);
    let v = app.flash_sale(stock).await;
    let screenshot = root.join("target/admin-console.png");
    let _ = std::fs::remove_file(&screenshot);
    let mut browser = Command::new(root.join("tests/browser/run.sh"))
        .arg("console.mjs")
        .arg(&app.addr)
        .arg(app.admin())
        .arg(v.to_string())
        .arg((waves * per_wave).to_string())
        .arg(stock.to_string())
        .arg(&screenshot)
        .stdout(Stdio::piped())
        .spawn()
        .expect("tests/browser/run.sh could not be started (is bash there?)");
    // The script's lines, read on a thread of their own (its stderr goes to the test's).
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let stdout = browser.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let ready = next_line(&mut rx).await;
    assert_eq!(
        ready.as_deref(),
        Some("READY"),
        "the page did not show the sale (the script's error is above)"
    );
    // Waves a second and a half apart, so that the page sees the numbers climb.
    let mut shopper = 0;
    for wave_no in 0..waves {
        if wave_no > 0 {
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        let answers = wave(&app, v, (shopper + 1)..=(shopper + per_wave)).await;
        assert_eq!(accepted(&answers).len() as i64, per_wave);
        shopper += per_wave;
    }
    assert_eq!(
        next_line(&mut rx).await.as_deref(),
        Some("PAUSED"),
        "the Pause button did not pause"
    );
    // The button paused the sale for real.
    assert_eq!(code(&app.order(v, 999).await.1), "sale_paused");
    let ok = next_line(&mut rx).await.unwrap_or_default();
    assert!(ok.starts_with("OK "), "the script did not finish: {ok}");
    // Its forms reached the API: the refused voucher was not created, the top-up was.
    assert!(ok.contains("stock: must be"), "{ok}");
    let (_, page) = app.get("/api/v1/admin/vouchers", Some(&app.admin())).await;
    assert_eq!(page["items"].as_array().unwrap().len(), 1, "{page}");
    assert_eq!(page["items"][0]["stock"], stock + 5);
    // It has said its last line: it is closing the browser.
    let status = browser.wait().unwrap();
    assert!(status.success(), "the browser script failed: {status}");
    assert!(screenshot.exists(), "no screenshot at {}", screenshot.display());
    app.shutdown().await;
}

/// The browser script's next line; None once it closed its output.
async fn next_line(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> Option<String> {
    tokio::time::timeout(Duration::from_secs(45), rx.recv())
        .await
        .expect("the browser script said nothing for 45 s")
}

/// The admission panel (`tests/browser/admission.mjs`): a queue's frontier, its
/// last admitted shoppers and the live rate form; a drawn raffle's commitment,
/// seed and winners. Screenshots at `target/admin-admission.png` and
/// `target/admin-admission-raffle.png`.
#[tokio::test]
async fn the_console_shows_a_queue_and_a_raffle() {
    use crate::admission::{admitted, join, sale_with};
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert!(
        Path::new("/usr/bin/chromium").exists(),
        "the browser test needs /usr/bin/chromium: run scripts/services.sh (installs the Debian package chromium)"
    );
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let now = chrono::Utc::now();
    let hour = chrono::Duration::hours(1);
    let queue = sale_with(
        &app,
        10,
        now - chrono::Duration::seconds(1),
        now + hour,
        serde_json::json!({"admission": "queue", "admit_rate": 1000}),
    )
    .await;
    for user in 1..=4 {
        assert_eq!(join(&app, queue, user, &[]).await.0, StatusCode::CREATED);
        admitted(&app, queue, user).await;
    }
    let draw_at = now + chrono::Duration::seconds(8);
    let chain = TestChain::fast();
    let raffle = sale_with(
        &app,
        2,
        draw_at,
        draw_at + hour,
        serde_json::json!({"admission": "raffle", "draw_at": draw_at.to_rfc3339(), "beacon": chain.field(None)}),
    )
    .await;
    for user in 1..=5 {
        let path = format!("/api/v1/vouchers/{raffle}/raffle/entries");
        let (status, body) = app.post(&path, Some(&app.shopper(user)), serde_json::json!({})).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let (_, summary) = app.get(&format!("/api/v1/vouchers/{raffle}/raffle"), None).await;
    let commitment = summary["commitment"].as_str().unwrap().to_owned();
    publish_round(&app.addr, raffle, &chain).await;
    let screenshot = root.join("target/admin-admission.png");
    let mut browser = Command::new(root.join("tests/browser/run.sh"))
        .args([
            "admission.mjs",
            &app.addr,
            &app.admin(),
            &queue.to_string(),
            "4",
            &raffle.to_string(),
        ])
        .args([commitment.as_str(), "2"])
        .arg(&screenshot)
        .stdout(Stdio::piped())
        .spawn()
        .expect("tests/browser/run.sh could not be started (is bash there?)");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let stdout = browser.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    assert_eq!(
        next_line(&mut rx).await.as_deref(),
        Some("RATE"),
        "the rate form did not take (the script's error is above)"
    );
    let (_, view) = app
        .get(&format!("/api/v1/admin/vouchers/{queue}/admission"), Some(&app.admin()))
        .await;
    assert_eq!(view["queue"]["admit_rate"], 7, "{view}");
    assert_eq!(
        next_line(&mut rx).await.as_deref(),
        Some("OK"),
        "the raffle panel (the script's error is above)"
    );
    assert!(browser.wait().unwrap().success());
    app.shutdown().await;
}
