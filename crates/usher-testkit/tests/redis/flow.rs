//! The whole path on real processes' code over real sockets: join, position, admission, token
//! verified by a booking service.

use serde_json::{json, Value};
use usher_testkit::line::{data, jwks, verify_token, T};
use usher_testkit::sse::SseItem;
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::SseClient;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_wait_admit_and_book() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions {
        booking: true,
        ..Default::default()
    })
    .await?;
    stack.create_queue("show", 5.0).await?;
    let client = SseClient::new(stack.gateway_url(0));
    let mut conn = client.open("/api/queues/show/stream", None).await?;
    assert_eq!(conn.status, 200);
    assert_eq!(conn.headers["content-type"], "text/event-stream");
    assert_eq!(conn.headers["cache-control"], "no-cache");
    assert_eq!(conn.headers["x-accel-buffering"], "no");
    assert!(
        matches!(conn.next_item(T).await?, Some(SseItem::Retry(_))),
        "retry: comes first"
    );
    let waiting = conn.next_event(T).await?.expect("waiting event");
    assert_eq!(waiting.event, "waiting");
    let w = data(&waiting);
    assert_eq!(w["queue"], "show");
    assert_eq!(w["position"], 1);
    assert_eq!(w["waiting"], 1);
    assert!(w["eta_seconds"].as_u64().is_some());
    let ticket = waiting.id.clone();
    assert!(ticket.starts_with("show."), "{ticket}");

    let admitted = conn.wait_for("admitted", T).await?;
    assert_eq!(admitted.id, ticket);
    let a = data(&admitted);
    let token = a["token"].as_str().expect("token").to_owned();
    assert!(a["expires_at"].as_str().is_some_and(|s| s.ends_with('Z')));
    assert_eq!(
        conn.next_item(T).await?,
        None,
        "the response ends after admitted"
    );

    // Verify the way a booking service does: JWKS + stock JWT library, aud = queue.
    let claims = verify_token(&jwks(&stack).await?, &token, "show")?;
    let place = ticket.split('.').nth(1).expect("place in ticket");
    assert_eq!(claims["sub"], place);
    assert_eq!(claims["aud"], "show");
    assert_eq!(claims["jti"], format!("show.{place}"));
    assert!(claims["exp"].as_u64() > claims["iat"].as_u64());

    // Counters, while the session is active.
    let q = stack.queue("show").await?;
    assert_eq!(q["admitted_total"], 1);
    assert_eq!(q["active"], 1);
    assert_eq!(q["waiting"], 0);

    // The demo booking service accepts it, and nothing else.
    let booking = stack.booking.as_ref().expect("booking").url();
    let book = |auth: Option<String>, queue: &'static str| {
        let mut r = stack
            .http
            .post(format!("{booking}/api/bookings"))
            .json(&json!({"queue": queue, "seat": "A1"}));
        if let Some(a) = auth {
            r = r.header("authorization", a);
        }
        r.send()
    };
    let ok = book(Some(format!("Bearer {token}")), "show").await?;
    assert_eq!(ok.status(), 201);
    let b: Value = ok.json().await?;
    assert_eq!(b["place"], place);
    let mut tampered = token.clone();
    let last = tampered.pop().expect("non-empty");
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    // Flip a claim too: a re-encoded payload with another audience.
    let parts: Vec<&str> = token.split('.').collect();
    use base64::Engine;
    let forged_payload =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(
            &json!({"sub": place, "aud": "show", "iat": 1, "exp": 4_000_000_000u64, "jti": "x"}),
        )?);
    let forged = format!("{}.{}.{}", parts[0], forged_payload, parts[2]);
    for bad in [tampered, forged, "not-a-jwt".to_owned()] {
        let r = book(Some(format!("Bearer {bad}")), "show").await?;
        assert_eq!(r.status(), 401, "{bad}");
        let e: Value = r.json().await?;
        assert!(e["error"].as_str().is_some());
    }
    assert_eq!(
        book(Some(format!("Bearer {token}")), "other-show")
            .await?
            .status(),
        401
    );
    assert_eq!(book(None, "show").await?.status(), 401);

    // The booking released the session: its slot is free.
    let q = stack.queue("show").await?;
    assert_eq!(q["admitted_total"], 1);
    assert_eq!(q["active"], 0);
    Ok(())
}
