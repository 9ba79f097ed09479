//! docs: `admission_responses_match_the_document`: every answer of the queue,
//! the raffle, the challenge and the admin's view, successes and errors, against
//! the OpenAPI document.
use super::*;
use crate::admission::{call, create_sale};
use chrono::Utc;

#[tokio::test]
async fn admission_responses_match_the_document() {
    let ns = Namespace::new().await;
    let app = TestApp::spawn(&ns).await;
    let (_, doc) = app.get("/api-docs/openapi.json", None).await;
    let (admin, shopper) = (app.admin(), app.shopper(5));
    let now = Utc::now();
    let (begin, end) = (now - chrono::Duration::seconds(1), now + chrono::Duration::hours(1));
    let queue = create_sale(
        &app.addr,
        &admin,
        5,
        begin,
        end,
        json!({"admission": "queue", "pow_difficulty": 10}),
    )
    .await;
    let draw_at = now + chrono::Duration::seconds(10);
    let chain = TestChain::fast();
    let raffle = create_sale(
        &app.addr,
        &admin,
        1,
        draw_at,
        end,
        json!({"admission": "raffle", "draw_at": draw_at.to_rfc3339(), "beacon": chain.field(None)}),
    )
    .await;
    let plain = app.flash_sale(1).await;
    let get = reqwest::Method::GET;
    let post = reqwest::Method::POST;
    let mut seen: Vec<(&str, &str, (StatusCode, Value))> = Vec::new();
    let c = call(
        &app.addr,
        get.clone(),
        &format!("/api/v1/vouchers/{queue}/challenge"),
        &shopper,
        &[],
        None,
    )
    .await;
    let challenge: seckill::admission::pow::Challenge = serde_json::from_value(c.1.clone()).unwrap();
    seen.push(("get", "/api/v1/vouchers/{id}/challenge", c));
    seen.push((
        "get",
        "/api/v1/vouchers/{id}/challenge",
        call(
            &app.addr,
            get.clone(),
            &format!("/api/v1/vouchers/{plain}/challenge"),
            &shopper,
            &[],
            None,
        )
        .await,
    ));
    let queue_path = format!("/api/v1/vouchers/{queue}/queue");
    seen.push((
        "post",
        "/api/v1/vouchers/{id}/queue",
        call(&app.addr, post.clone(), &queue_path, &shopper, &[], None).await,
    ));
    let solved = seckill::admission::pow::payload(&challenge, seckill::admission::pow::solve(&challenge).unwrap());
    let joined = call(
        &app.addr,
        post.clone(),
        &queue_path,
        &shopper,
        &[("X-Altcha", &solved)],
        None,
    )
    .await;
    assert_eq!(joined.0, StatusCode::CREATED, "{}", joined.1);
    seen.push(("post", "/api/v1/vouchers/{id}/queue", joined));
    seen.push((
        "post",
        "/api/v1/vouchers/{id}/queue",
        call(
            &app.addr,
            post.clone(),
            &format!("/api/v1/vouchers/{plain}/queue"),
            &shopper,
            &[],
            None,
        )
        .await,
    ));
    let me = format!("/api/v1/vouchers/{queue}/queue/me");
    seen.push((
        "get",
        "/api/v1/vouchers/{id}/queue/me",
        call(&app.addr, get.clone(), &me, &shopper, &[], None).await,
    ));
    seen.push((
        "get",
        "/api/v1/vouchers/{id}/queue/me",
        call(&app.addr, get.clone(), &me, &app.shopper(6), &[], None).await,
    ));
    seen.push((
        "get",
        "/api/v1/vouchers/{id}/queue/me",
        call(
            &app.addr,
            get.clone(),
            &me,
            &shopper,
            &[("X-Queue-Ticket", "forged")],
            None,
        )
        .await,
    ));
    let admission = format!("/api/v1/admin/vouchers/{queue}/admission");
    seen.push((
        "get",
        "/api/v1/admin/vouchers/{id}/admission",
        call(&app.addr, get.clone(), &admission, &admin, &[], None).await,
    ));
    seen.push((
        "post",
        "/api/v1/admin/vouchers/{id}/admission",
        call(
            &app.addr,
            post.clone(),
            &admission,
            &admin,
            &[],
            Some(json!({"admit_rate": 7})),
        )
        .await,
    ));
    seen.push((
        "post",
        "/api/v1/admin/vouchers/{id}/admission",
        call(
            &app.addr,
            post.clone(),
            &admission,
            &admin,
            &[],
            Some(json!({"admit_rate": 0})),
        )
        .await,
    ));
    seen.push((
        "post",
        "/api/v1/admin/vouchers/{id}/admission",
        call(
            &app.addr,
            post.clone(),
            &format!("/api/v1/admin/vouchers/{plain}/admission"),
            &admin,
            &[],
            Some(json!({"admit_rate": 7})),
        )
        .await,
    ));
    // The raffle: entered, not yet drawn; then drawn.
    let entries = format!("/api/v1/vouchers/{raffle}/raffle/entries");
    seen.push((
        "post",
        "/api/v1/vouchers/{id}/raffle/entries",
        call(&app.addr, post.clone(), &entries, &shopper, &[], None).await,
    ));
    seen.push((
        "post",
        "/api/v1/vouchers/{id}/raffle/entries",
        call(&app.addr, post.clone(), &entries, &shopper, &[], None).await,
    ));
    let summary = format!("/api/v1/vouchers/{raffle}/raffle");
    seen.push((
        "get",
        "/api/v1/vouchers/{id}/raffle",
        call(&app.addr, get.clone(), &summary, &shopper, &[], None).await,
    ));
    let raffle_me = format!("/api/v1/vouchers/{raffle}/raffle/me");
    seen.push((
        "get",
        "/api/v1/vouchers/{id}/raffle/me",
        call(&app.addr, get.clone(), &raffle_me, &shopper, &[], None).await,
    ));
    let beacon = format!("/api/v1/vouchers/{raffle}/raffle/beacon");
    // Before draw_at: refused; a malformed signature: refused.
    seen.push((
        "post",
        "/api/v1/vouchers/{id}/raffle/beacon",
        call(
            &app.addr,
            post.clone(),
            &beacon,
            "",
            &[],
            Some(json!({"round": 1, "signature": chain.sign(1)})),
        )
        .await,
    ));
    seen.push((
        "post",
        "/api/v1/vouchers/{id}/raffle/beacon",
        call(
            &app.addr,
            post.clone(),
            &beacon,
            "",
            &[],
            Some(json!({"round": 1, "signature": "xyz"})),
        )
        .await,
    ));
    tokio::time::sleep((draw_at - Utc::now()).to_std().unwrap_or_default() + Duration::from_millis(200)).await;
    let round = chain_round(&app.addr, raffle).await;
    // Another round, a signature of another round: refused; the round: accepted.
    seen.push((
        "post",
        "/api/v1/vouchers/{id}/raffle/beacon",
        call(
            &app.addr,
            post.clone(),
            &beacon,
            "",
            &[],
            Some(json!({"round": round + 1, "signature": chain.sign(round + 1)})),
        )
        .await,
    ));
    seen.push((
        "post",
        "/api/v1/vouchers/{id}/raffle/beacon",
        call(
            &app.addr,
            post.clone(),
            &beacon,
            "",
            &[],
            Some(json!({"round": round, "signature": chain.sign(round + 1)})),
        )
        .await,
    ));
    seen.push((
        "post",
        "/api/v1/vouchers/{id}/raffle/beacon",
        call(
            &app.addr,
            post.clone(),
            &beacon,
            "",
            &[],
            Some(json!({"round": round, "signature": chain.sign(round)})),
        )
        .await,
    ));
    publish_round(&app.addr, raffle, &chain).await;
    seen.push((
        "get",
        "/api/v1/vouchers/{id}/raffle",
        call(&app.addr, get.clone(), &summary, &shopper, &[], None).await,
    ));
    let won = call(&app.addr, get.clone(), &raffle_me, &shopper, &[], None).await;
    assert_eq!(won.1["won"], true, "{}", won.1);
    seen.push(("get", "/api/v1/vouchers/{id}/raffle/me", won));
    seen.push((
        "get",
        "/api/v1/vouchers/{id}/raffle/me",
        call(&app.addr, get.clone(), &raffle_me, &app.shopper(6), &[], None).await,
    ));
    seen.push((
        "post",
        "/api/v1/vouchers/{id}/raffle/entries",
        call(&app.addr, post.clone(), &entries, &app.shopper(6), &[], None).await,
    ));
    seen.push((
        "get",
        "/api/v1/vouchers/{id}/raffle/entries",
        call(&app.addr, get.clone(), &entries, &shopper, &[], None).await,
    ));
    seen.push((
        "get",
        "/api/v1/vouchers/{id}/raffle/entries",
        call(
            &app.addr,
            get.clone(),
            &format!("{entries}?after=xyz"),
            &shopper,
            &[],
            None,
        )
        .await,
    ));
    seen.push((
        "get",
        "/api/v1/admin/vouchers/{id}/admission",
        call(
            &app.addr,
            get.clone(),
            &format!("/api/v1/admin/vouchers/{raffle}/admission"),
            &admin,
            &[],
            None,
        )
        .await,
    ));
    // An order of the queue sale without a token.
    seen.push((
        "post",
        "/api/v1/vouchers/{id}/orders",
        call(
            &app.addr,
            post.clone(),
            &format!("/api/v1/vouchers/{queue}/orders"),
            &shopper,
            &[],
            Some(json!({})),
        )
        .await,
    ));

    let statuses: BTreeSet<u16> = seen.iter().map(|(_, _, (s, _))| s.as_u16()).collect();
    assert_eq!(
        statuses,
        BTreeSet::from([200, 201, 202, 400, 403, 404, 409, 422]),
        "successes and errors"
    );
    for (method, path, (status, body)) in &seen {
        let response = &doc["paths"][path][method]["responses"][status.as_str()];
        let schema = &response["content"]["application/json"]["schema"];
        assert!(schema.is_object(), "{method} {path} {status} is not documented: {body}");
        let mut problems = Vec::new();
        conform(&doc, schema, body, "$", true, &mut problems);
        assert!(problems.is_empty(), "{method} {path} {status}: {problems:?} in {body}");
    }
    app.shutdown().await;
}

/// The round raffle `v` draws with, once its entries are closed.
async fn chain_round(base: &str, v: i64) -> i64 {
    eventually(Duration::from_secs(30), || async {
        let s: Value = reqwest::get(format!("{base}/api/v1/vouchers/{v}/raffle"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (s["status"] != "open").then(|| s["beacon"]["round"].as_i64().unwrap())
    })
    .await
    .expect("the raffle closed")
}
