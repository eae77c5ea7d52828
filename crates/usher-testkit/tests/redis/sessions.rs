//! The session API booking services call with the entry token (`GET /api/session`,
//! `POST /api/session/touch`, `DELETE /api/session`), sliding sessions and their cap, resumes
//! of ended sessions, and the demo booking service's one booking per session.

use std::time::Duration;

use reqwest::{Method, Response};
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use usher_mint::token::{Claims, SigningKey};
use usher_testkit::answers::json_error;
use usher_testkit::line::{admitted, claims, data, dispatcher_key, T};
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::wait::{eventually, eventually_within};
use usher_testkit::SseClient;

/// A stack whose dispatcher ticks every 100 ms, with the demo booking service.
async fn stack() -> anyhow::Result<Stack> {
    Stack::start(StackOptions {
        booking: true,
        tick_ms: 100,
        ..Default::default()
    })
    .await
}

/// One call of the session API with `token` as the bearer.
async fn session(
    stack: &Stack,
    method: Method,
    path: &str,
    token: &str,
) -> anyhow::Result<Response> {
    Ok(stack
        .http
        .request(method, format!("{}{path}", stack.dispatcher.url()))
        .bearer_auth(token)
        .send()
        .await?)
}

async fn get(stack: &Stack, token: &str) -> anyhow::Result<Response> {
    session(stack, Method::GET, "/api/session", token).await
}

async fn touch(stack: &Stack, token: &str) -> anyhow::Result<Response> {
    session(stack, Method::POST, "/api/session/touch", token).await
}

async fn release(stack: &Stack, token: &str) -> anyhow::Result<Response> {
    session(stack, Method::DELETE, "/api/session", token).await
}

/// A `200` body's `expires_at`, in ms since the epoch.
async fn expires_ms(r: Response) -> anyhow::Result<u64> {
    anyhow::ensure!(r.status() == 200, "session answered {}", r.status());
    let v: Value = r.json().await?;
    let at = OffsetDateTime::parse(v["expires_at"].as_str().unwrap_or_default(), &Rfc3339)?;
    Ok((at.unix_timestamp_nanos() / 1_000_000) as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_active_until_released_and_release_is_idempotent() -> anyhow::Result<()> {
    let stack = stack().await?;
    stack.create_queue("show", 50.0).await?;
    let (ticket, token) = admitted(&stack, "show").await?;
    let place = ticket.split('.').nth(1).unwrap_or_default().to_owned();

    let r = get(&stack, &token).await?;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["cache-control"], "no-store");
    let v: Value = r.json().await?;
    assert_eq!(v["queue"], "show");
    assert_eq!(v["session"], format!("show.{place}"));
    assert!(v["expires_at"].as_str().is_some_and(|s| s.ends_with('Z')));
    assert_eq!(stack.queue("show").await?["active"], 1);

    assert_eq!(release(&stack, &token).await?.status(), 204);
    assert_eq!(
        stack.queue("show").await?["active"],
        0,
        "the slot frees at once"
    );
    json_error(get(&stack, &token).await?, 410).await?;
    json_error(touch(&stack, &token).await?, 410).await?;
    assert_eq!(
        release(&stack, &token).await?.status(),
        204,
        "DELETE is idempotent"
    );
    json_error(get(&stack, &token).await?, 410).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_that_do_not_verify_get_401_and_genuine_expired_ones_410() -> anyhow::Result<()> {
    let stack = stack().await?;
    stack.create_queue("show", 50.0).await?;
    let (_, token) = admitted(&stack, "show").await?;
    let genuine = claims(&token)?;
    let key = dispatcher_key(&stack).await?;
    let stranger = SigningKey::from_pkcs8_pem(&SigningKey::generate_pem()?)?;

    let mut tampered = token.clone();
    let last = tampered.pop().unwrap_or('A');
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    let other_key = stranger.mint(&genuine);
    let other_queue = key.mint(&Claims {
        aud: "elsewhere".into(),
        jti: format!("elsewhere.{}", genuine.sub),
        ..genuine.clone()
    });
    let wrong_jti = key.mint(&Claims {
        jti: "show.999999".into(),
        ..genuine.clone()
    });
    for bad in [
        tampered,
        other_key,
        other_queue,
        wrong_jti,
        "not-a-jwt".to_owned(),
    ] {
        json_error(get(&stack, &bad).await?, 401).await?;
        json_error(touch(&stack, &bad).await?, 401).await?;
        json_error(release(&stack, &bad).await?, 401).await?;
    }
    let r = stack
        .http
        .get(format!("{}/api/session", stack.dispatcher.url()))
        .send()
        .await?;
    json_error(r, 401).await?;
    assert_eq!(
        get(&stack, &token).await?.status(),
        200,
        "the session is untouched"
    );

    // A genuine token past its exp is an ended session, not a bad token.
    let past = key.mint(&Claims {
        exp: genuine.iat.saturating_sub(1),
        ..genuine
    });
    json_error(get(&stack, &past).await?, 410).await?;
    assert_eq!(release(&stack, &past).await?.status(), 204);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_past_its_ttl_is_gone_and_a_resume_says_it_ended() -> anyhow::Result<()> {
    let stack = stack().await?;
    stack
        .put_queue(
            "brief",
            // 3 s: the first GET after the admission (minting, delivery, a request) must land
            // inside the session even on a loaded machine.
            json!({"admit_per_second": 50.0, "session_ttl_seconds": 3}),
        )
        .await?;
    let (ticket, token) = admitted(&stack, "brief").await?;
    let exp = claims(&token)?.exp;
    assert_eq!(get(&stack, &token).await?.status(), 200);
    // Wait out the token's exp (seconds, whole): the dispatcher answers 410 from then on.
    eventually_within(
        "the session to expire",
        Duration::from_secs(20),
        async || {
            let status = get(&stack, &token).await?.status();
            anyhow::ensure!(status != 200, "GET answers {status}");
            Ok(())
        },
    )
    .await?;
    let now = usher_core::time::now_ms();
    assert!(
        now >= exp * 1000,
        "410 at {now}, before the token's exp {exp}"
    );
    json_error(get(&stack, &token).await?, 410).await?;
    // The session itself expires within a second of the token's exp (a whole second).
    eventually("the slot to free", async || {
        let active = stack.queue("brief").await?["active"].clone();
        anyhow::ensure!(active == 0, "{active} active");
        Ok(())
    })
    .await?;
    resumed_session_ended(&stack, "brief", &ticket).await
}

/// A resume (EventSource's reconnect with `Last-Event-ID`) and a status poll of an admitted
/// place whose session ended: `closed` with `session_ended`, never the old token.
async fn resumed_session_ended(stack: &Stack, queue: &str, ticket: &str) -> anyhow::Result<()> {
    let client = SseClient::new(stack.gateway_url(0));
    let mut conn = client
        .open(&format!("/api/queues/{queue}/stream"), Some(ticket))
        .await?;
    assert_eq!(conn.status, 200);
    let e = conn.next_event(T).await?.expect("an event");
    assert_eq!(e.event, "closed", "{e:?}");
    assert_eq!(data(&e)["reason"], "session_ended");
    assert_eq!(data(&e)["queue"], queue);
    assert!(!e.data.contains("token"));
    let r = stack
        .http
        .get(format!(
            "{}/api/queues/{queue}/status",
            stack.gateway_url(0)
        ))
        .query(&[("ticket", ticket)])
        .send()
        .await?;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await?;
    assert_eq!(
        (&v["state"], &v["reason"]),
        (&json!("closed"), &json!("session_ended"))
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_after_release_is_closed_with_session_ended() -> anyhow::Result<()> {
    let stack = stack().await?;
    stack.create_queue("show", 50.0).await?;
    let (ticket, token) = admitted(&stack, "show").await?;
    // Before the release the resume shows the same token again.
    let client = SseClient::new(stack.gateway_url(0));
    let mut again = client
        .open("/api/queues/show/stream", Some(&ticket))
        .await?;
    let a = again.wait_for("admitted", T).await?;
    assert_eq!(data(&a)["token"], token.as_str());
    assert_eq!(release(&stack, &token).await?.status(), 204);
    resumed_session_ended(&stack, "show", &ticket).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_touch_slides_a_sliding_session_up_to_its_cap() -> anyhow::Result<()> {
    let stack = stack().await?;
    stack
        .put_queue(
            "slide",
            // A TTL of 4 s (touches 0.5 s apart land well inside it even on a loaded machine)
            // and a cap of 8.
            json!({"admit_per_second": 50.0, "session_ttl_seconds": 4, "sliding_session": true,
                   "max_session_seconds": 8}),
        )
        .await?;
    let q = stack.queue("slide").await?;
    assert_eq!(
        (&q["sliding_session"], &q["max_session_seconds"]),
        (&json!(true), &json!(8))
    );
    let (_, token) = admitted(&stack, "slide").await?;
    let c = claims(&token)?;
    assert_eq!(
        c.exp - c.iat,
        8,
        "a sliding session's token lasts until its cap"
    );
    let cap_ms = c.exp * 1000;

    let first = expires_ms(get(&stack, &token).await?).await?;
    // The end-to-end test of sliding sessions runs on the wall clock (a touch slides the
    // expiry to now + TTL, so now must move); `time_rules::` checks the rule's edges at the
    // store with a synthetic clock.
    let slid = eventually(
        "a touch to slide the expiry past the first one",
        async || {
            let e = expires_ms(touch(&stack, &token).await?).await?;
            anyhow::ensure!(e > first, "a touch left the expiry at {e} (first {first})");
            Ok(e)
        },
    )
    .await?;
    assert!(slid > first, "a touch extends: {slid} > {first}");
    assert_eq!(expires_ms(get(&stack, &token).await?).await?, slid);
    // Keep touching: the expiry never passes the cap, and reaches it.
    // Touches as the wall clock moves (see above), until one reaches the cap.
    let mut last = slid;
    eventually("touches to reach the cap", async || {
        let r = touch(&stack, &token).await?;
        if r.status() == 410 {
            return Ok(());
        }
        let e = expires_ms(r).await?;
        assert!(e <= cap_ms, "{e} past the cap {cap_ms}");
        assert!(e >= last, "a touch never shortens");
        last = e;
        anyhow::ensure!(e == cap_ms, "a touch slid to {e}, the cap is {cap_ms}");
        Ok(())
    })
    .await?;
    assert_eq!(last, cap_ms, "touches stop at the cap");
    // After the cap, the session has ended whatever the touches.
    eventually("the session to end at its cap", async || {
        let status = get(&stack, &token).await?.status();
        anyhow::ensure!(status != 200, "GET answers {status}");
        Ok(())
    })
    .await?;
    json_error(touch(&stack, &token).await?, 410).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_touch_keeps_a_fixed_session_and_bad_caps_are_refused() -> anyhow::Result<()> {
    let stack = stack().await?;
    stack.create_queue("show", 50.0).await?;
    let q = stack.queue("show").await?;
    assert_eq!(
        (&q["sliding_session"], &q["max_session_seconds"]),
        (&json!(false), &json!(1800))
    );
    let (_, token) = admitted(&stack, "show").await?;
    let c = claims(&token)?;
    assert_eq!(c.exp - c.iat, 600, "a fixed session's token lasts the TTL");
    let before = expires_ms(get(&stack, &token).await?).await?;
    // Wall-clock time must pass for a wrong slide to show (see the sliding test above): a
    // second past the admission (`before` is the admission plus the 600 s TTL).
    usher_testkit::wait::clock_past("a second past the admission", before - 600_000 + 1_000)
        .await?;
    assert_eq!(expires_ms(touch(&stack, &token).await?).await?, before);

    for body in [
        json!({"max_session_seconds": 599}),
        json!({"session_ttl_seconds": 700, "max_session_seconds": 650}),
        json!({"max_session_seconds": 10_000_000}),
    ] {
        let r = stack
            .http
            .put(format!("{}/admin/queues/show", stack.dispatcher.url()))
            .json(&body)
            .send()
            .await?;
        json_error(r, 400).await?;
    }
    // Omitted fields keep their values; a cap at its default follows the TTL.
    let v = stack
        .put_queue("show", json!({"sliding_session": true}))
        .await?;
    assert_eq!(
        (&v["sliding_session"], &v["max_session_seconds"]),
        (&json!(true), &json!(1800))
    );
    let v = stack
        .put_queue("show", json!({"session_ttl_seconds": 60}))
        .await?;
    assert_eq!(
        (&v["sliding_session"], &v["max_session_seconds"]),
        (&json!(true), &json!(180))
    );
    let v = stack
        .put_queue("show", json!({"max_session_seconds": 100}))
        .await?;
    assert_eq!(v["max_session_seconds"], 100);
    let v = stack
        .put_queue("show", json!({"session_ttl_seconds": 90}))
        .await?;
    assert_eq!(v["max_session_seconds"], 100, "a cap set by hand stays");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_booking_service_books_once_per_session() -> anyhow::Result<()> {
    let stack = stack().await?;
    stack.create_queue("show", 50.0).await?;
    let (_, token) = admitted(&stack, "show").await?;
    let booking = stack.booking.as_ref().expect("booking").url();
    let book = || {
        stack
            .http
            .post(format!("{booking}/api/bookings"))
            .bearer_auth(&token)
            .json(&json!({"queue": "show", "seat": "A1"}))
            .send()
    };
    assert_eq!(book().await?.status(), 201);
    json_error(get(&stack, &token).await?, 410).await?;
    json_error(book().await?, 403).await?;
    assert_eq!(stack.queue("show").await?["active"], 0);
    Ok(())
}
