//! States people understand (issue 24, item 6), over real processes: `maintenance` and `ended`
//! set in `PUT /admin/queues/{queue}` and pushed at once to every waiting browser (`status`,
//! `closed` `ended` with the operator's text); the pre-queue's `entrants` in the admin view;
//! the page of an unknown or closed queue is HTML, not JSON; `grace_seconds` has a floor; the
//! demo's entry page books. (What the page shows in Chromium: `browsers::states_page`.)

use serde_json::{json, Value};
use usher_core::time::{now_ms, rfc3339_ms};
use usher_testkit::answers::header;
use usher_testkit::line::{admitted, data, join_watch, waiters, PAUSED, T};
use usher_testkit::sse::Watcher;
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::wait::eventually;
use usher_testkit::SseClient;

/// `PUT /admin/queues/{queue}` with `body`: (status, JSON answer).
async fn put(stack: &Stack, queue: &str, body: Value) -> anyhow::Result<(u16, Value)> {
    let r = stack
        .http
        .put(format!("{}/admin/queues/{queue}", stack.dispatcher.url()))
        .json(&body)
        .send()
        .await?;
    Ok((r.status().as_u16(), r.json().await?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grace_seconds_has_a_floor_of_one() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    stack.create_queue("g", PAUSED).await?;
    for bad in [0, 3601] {
        let (status, v) = put(&stack, "g", json!({"grace_seconds": bad})).await?;
        assert_eq!(status, 400, "grace_seconds {bad}: {v}");
        assert_eq!(
            v["error"], "grace_seconds must be between 1 and 3600",
            "the error names the range"
        );
    }
    assert_eq!(stack.queue("g").await?["grace_seconds"], 300, "unchanged");
    // In range (below 10 only when confirmed: the `edits::` tests).
    for good in [
        json!({"grace_seconds": 1, "confirm": true}),
        json!({"grace_seconds": 3600}),
    ] {
        let (status, v) = put(&stack, "g", good.clone()).await?;
        assert_eq!(status, 200, "{good}: {v}");
        assert_eq!(v["grace_seconds"], good["grace_seconds"]);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_holds_admission_keeps_places_and_reaches_every_browser_at_once(
) -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions {
        gateways: 2,
        ..Default::default()
    })
    .await?;
    let (a, b) = (
        SseClient::new(stack.gateway_url(0)),
        SseClient::new(stack.gateway_url(1)),
    );
    stack.create_queue("gig", PAUSED).await?;
    let mut line = waiters(&a, "gig", 2).await?;
    line.extend(waiters(&b, "gig", 2).await?);

    let text = "We are fixing the seat map. Back at 10:30.";
    let (status, v) = put(&stack, "gig", json!({"maintenance": text})).await?;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["maintenance"], text);
    assert_eq!(v["paused"], true, "maintenance holds admission");
    assert_eq!(v["rate_reason"], "paused");
    eventually(
        "every browser on both gateways hears the maintenance",
        async || line.iter().all(|(_, w)| w.last("status").is_some()),
    )
    .await?;
    for (ticket, w) in &line {
        let e = w.last("status").expect("seen");
        assert_eq!(
            data(&e),
            json!({"queue": "gig", "state": "maintenance", "message": text})
        );
        assert_eq!(
            &e.id, ticket,
            "no id: line; the last event id stays the ticket"
        );
        assert!(!w.has_ended(), "maintenance does not end the stream");
    }

    // A fast rate set during maintenance admits nobody; a join still takes a place and waits.
    let (status, v) = put(&stack, "gig", json!({"admit_per_second": 1000.0})).await?;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["effective_per_second"], 0.0, "{v}");
    assert_eq!(v["rate_reason"], "paused", "{v}");
    let (late, pos, late_w) = join_watch(&a, "gig").await?;
    assert_eq!(pos, 5, "a join during maintenance takes the next place");
    line.push((late, late_w));
    let v = stack.queue("gig").await?;
    assert_eq!(v["waiting"], 5, "every place is kept: {v}");
    assert_eq!(v["admitted_total"], 0, "nobody admitted: {v}");

    // A stream that opens during maintenance hears `status` before its first `waiting`: a
    // join, and a browser coming back on another gateway (it may have missed the push). Both
    // gateways heard the push, which makes them read the queue's setting again.
    let first_two = |mut conn: usher_testkit::sse::SseConn| async move {
        anyhow::ensure!(conn.status == 200, "answered {}", conn.status);
        let mut got = Vec::new();
        for _ in 0..2 {
            let e = conn
                .next_event(T)
                .await?
                .ok_or_else(|| anyhow::anyhow!("the stream ended"))?;
            got.push(e);
        }
        anyhow::Ok((got, conn))
    };
    let (got, conn) = first_two(a.open("/api/queues/gig/stream", None).await?).await?;
    assert_eq!(
        (
            got[0].event.as_str(),
            data(&got[0])["state"].clone(),
            got[1].event.as_str()
        ),
        ("status", json!("maintenance"), "waiting")
    );
    let ticket = got[1].id.clone();
    drop(conn);
    let (got, conn) = first_two(b.open("/api/queues/gig/stream", Some(&ticket)).await?).await?;
    assert_eq!(
        (
            got[0].event.as_str(),
            data(&got[0])["message"].clone(),
            got[1].event.as_str()
        ),
        ("status", json!(text), "waiting")
    );
    assert_eq!(got[1].id, ticket, "the same place");
    line.push((ticket, Watcher::spawn_with(conn, got)));

    // Contradictions and bad texts are refused, and change nothing.
    for body in [
        json!({"maintenance": text, "paused": false}),
        json!({"paused": false}),
        json!({"maintenance": ""}),
        json!({"maintenance": "a\nb"}),
        json!({"maintenance": "x".repeat(501)}),
    ] {
        let (status, v) = put(&stack, "gig", body.clone()).await?;
        assert_eq!(status, 400, "{body}: {v}");
        assert!(v["error"].as_str().is_some(), "a JSON error: {v}");
    }

    // The end of maintenance is pushed too, and admission resumes: everyone is admitted.
    let (status, v) = put(&stack, "gig", json!({"maintenance": null})).await?;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["maintenance"], Value::Null);
    assert_eq!(
        v["paused"], false,
        "the end of maintenance resumes admission"
    );
    eventually("every browser is admitted", async || {
        line.iter().all(|(_, w)| w.last("admitted").is_some())
    })
    .await?;
    for (_, w) in &line[..4] {
        let states: Vec<Value> = w
            .all("status")
            .iter()
            .map(|e| data(e)["state"].clone())
            .collect();
        assert_eq!(
            states,
            [json!("maintenance"), json!("open")],
            "in and out, once each"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_a_sale_closes_the_line_with_the_operators_text() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    let c = SseClient::new(stack.gateway_url(0));
    stack.create_queue("tour", PAUSED).await?;
    let line = waiters(&c, "tour", 3).await?;

    let (status, v) = put(&stack, "tour", json!({"ended": "x", "open": true})).await?;
    assert_eq!(status, 400, "ended and open: true contradict: {v}");

    let text = "The tour is sold out. Thank you for waiting!";
    let (status, v) = put(&stack, "tour", json!({"ended": text})).await?;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["ended"], text);
    assert_eq!(v["open"], false, "an ended sale is closed");
    eventually("every browser hears the end", async || {
        line.iter().all(|(_, w)| w.has_ended())
    })
    .await?;
    for (_, w) in &line {
        let e = w.last("closed").expect("closed");
        assert_eq!(
            data(&e),
            json!({"queue": "tour", "reason": "ended", "message": text})
        );
    }

    // A new join is refused; the page says why, as a page with the status of a closed line.
    let conn = c.open("/api/queues/tour/stream", None).await?;
    assert_eq!(conn.status, 404, "an ended queue takes no joins");
    let page = reqwest::get(format!("{}/q/tour", stack.gateway_url(0))).await?;
    assert_eq!(page.status(), 410);
    assert_eq!(header(&page, "content-type"), "text/html; charset=utf-8");
    let html = page.text().await?;
    assert!(html.contains(r#""closed":"ended""#), "{html}");
    assert!(html.contains(text), "the page carries the text: {html}");

    // Reopening clears the text.
    let (status, v) = put(&stack, "tour", json!({"open": true})).await?;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["ended"], Value::Null);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pre_queue_shows_its_entrants_before_the_sale_opens() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    stack.create_queue("drop", 100.0).await?;
    let (status, v) = put(
        &stack,
        "drop",
        json!({"opens_at": rfc3339_ms(now_ms() + 600_000)}),
    )
    .await?;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["entrants"], 0);
    let c = SseClient::new(stack.gateway_url(0));
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut conn = c.open("/api/queues/drop/stream", None).await?;
        assert_eq!(conn.status, 200);
        conn.wait_for("scheduled", T).await?;
        held.push(conn);
    }
    let v = stack.queue("drop").await?;
    assert_eq!(v["entrants"], 3, "{v}");
    assert_eq!(v["waiting"], 0, "nobody is in line before the draw: {v}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_queue_page_is_a_page_and_the_api_keeps_json() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    let gw = stack.gateway_url(0);
    let r = reqwest::get(format!("{gw}/q/nosuch")).await?;
    assert_eq!(r.status(), 404);
    assert_eq!(header(&r, "content-type"), "text/html; charset=utf-8");
    assert!(header(&r, "content-security-policy").contains("default-src 'none'"));
    let html = r.text().await?;
    assert!(html.starts_with("<!doctype html>"), "{html}");
    assert!(
        html.contains("There is no waiting line at this address"),
        "{html}"
    );
    assert!(!html.contains("\"error\""), "not the API's JSON: {html}");

    let ko = reqwest::Client::new()
        .get(format!("{gw}/q/nosuch"))
        .header("accept-language", "ko")
        .send()
        .await?;
    assert_eq!(ko.status(), 404);
    assert!(ko.text().await?.contains("이 주소에는 대기열이 없습니다"));

    // The API's own routes keep their JSON errors.
    let api = reqwest::get(format!("{gw}/api/queues/nosuch/draw")).await?;
    assert_eq!(api.status(), 404);
    assert!(header(&api, "content-type").starts_with("application/json"));
    let v: Value = api.json().await?;
    assert!(v["error"].is_string(), "{v}");

    // A closed queue's page is the page (it says why), with 410.
    stack.create_queue("shut", PAUSED).await?;
    let r = stack
        .http
        .delete(format!("{}/admin/queues/shut", stack.dispatcher.url()))
        .send()
        .await?;
    assert_eq!(r.status(), 200);
    let r = reqwest::get(format!("{gw}/q/shut")).await?;
    assert_eq!(r.status(), 410);
    assert!(r.text().await?.contains(r#""closed":"queue_closed""#));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_entry_page_fits_a_phone_and_books_once() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions {
        booking: true,
        ..Default::default()
    })
    .await?;
    let demo = stack.booking.as_ref().expect("booking demo").url();
    // Without USHER_QUEUE_PAGE_URL the landing page says how to link the waiting room.
    let r = reqwest::get(format!("{demo}/")).await?;
    assert_eq!(r.status(), 200);
    let html = r.text().await?;
    assert!(html.contains("name=viewport"), "{html}");
    assert!(
        html.contains("Set <code>USHER_QUEUE_PAGE_URL</code>"),
        "{html}"
    );
    stack.create_queue("shop", 50.0).await?;
    let (_, token) = admitted(&stack, "shop").await?;
    let client = reqwest::Client::new();
    let r = client
        .post(format!("{demo}/entry"))
        .form(&[("token", token.as_str()), ("queue", "shop")])
        .send()
        .await?;
    assert_eq!(r.status(), 200);
    let html = r.text().await?;
    assert!(
        html.contains(r#"<meta name=viewport content="width=device-width, initial-scale=1">"#),
        "{html}"
    );
    assert!(
        html.contains("<form id=book method=post action=/book>"),
        "{html}"
    );
    assert!(
        html.contains(&format!("value=\"{token}\"")),
        "the form carries the token"
    );

    let book = || {
        client
            .post(format!("{demo}/book"))
            .form(&[("token", token.as_str()), ("queue", "shop"), ("seat", "A2")])
            .send()
    };
    let r = book().await?;
    assert_eq!(r.status(), 201);
    let html = r.text().await?;
    assert!(html.contains("Booked: seat A2 in shop"), "{html}");
    assert!(html.contains("name=viewport"), "{html}");
    let again = book().await?;
    assert_eq!(again.status(), 403, "one admission books once");
    Ok(())
}
