//! `usher-admission`, the library for Rust booking services, against a real dispatcher,
//! gateway and Redis: offline verification with its JWKS cache, the online session calls, and
//! the tower layer that guards routes.

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::routing::get;
use axum::{Extension, Json, Router};
use serde_json::{json, Value};
use usher_admission::{
    ActiveSession, Admission, Claims as AdmittedClaims, Error, KeyError, SessionStatus, VerifyError,
};
use usher_mint::token::{Claims, SigningKey};
use usher_testkit::answers::json_error;
use usher_testkit::jwks_relay::JwksRelay;
use usher_testkit::line::{admitted, claims, dispatcher_key, T};
use usher_testkit::procs::free_addr;
use usher_testkit::stack::{Server, Stack, StackOptions};
use usher_testkit::wait::{eventually, within};

async fn stack() -> anyhow::Result<Stack> {
    let stack = Stack::start(StackOptions {
        booking: true,
        ..Default::default()
    })
    .await?;
    stack.create_queue("show", 50.0).await?;
    Ok(stack)
}

/// A handle for the queues these tests admit to (the session calls ask about the token's own).
fn admission(stack: &Stack) -> anyhow::Result<Admission> {
    Ok(Admission::builder(stack.dispatcher.url())
        .audiences(["show", "slide"])
        .build()?)
}

/// `token` with its signature's last character changed.
fn tampered(token: &str) -> String {
    let mut t = token.to_owned();
    let last = t.pop().unwrap_or('A');
    t.push(if last == 'A' { 'B' } else { 'A' });
    t
}

/// A token for `claims` signed by a key the dispatcher never published (a new kid each call).
fn stranger(claims: &Claims) -> anyhow::Result<String> {
    Ok(SigningKey::from_pkcs8_pem(&SigningKey::generate_pem()?)?.mint(claims))
}

/// A compact JWS with this header and claims, and a junk signature.
fn unsigned(header: Value, claims: &Claims) -> anyhow::Result<String> {
    use base64::Engine;
    let b64 = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    Ok(format!(
        "{}.{}.{}",
        b64(&serde_json::to_vec(&header)?),
        b64(&serde_json::to_vec(claims)?),
        b64(b"not a signature")
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_accepts_genuine_tokens_and_names_what_is_wrong_with_others() -> anyhow::Result<()> {
    let stack = stack().await?;
    let (ticket, token) = admitted(&stack, "show").await?;
    let genuine = claims(&token)?;
    let place = ticket.split('.').nth(1).unwrap_or_default();
    let a = admission(&stack)?;

    let c = a.verify(&token).await?;
    assert_eq!(
        (c.sub.as_str(), c.aud.as_str(), c.jti.clone()),
        (place, "show", format!("show.{place}"))
    );
    assert_eq!((c.iat, c.exp), (genuine.iat, genuine.exp));
    assert_eq!(a.verify_for(&token, "show").await?, c);
    assert!(matches!(
        a.verify_for(&token, "other").await,
        Err(VerifyError::Audience)
    ));
    let only_show = Admission::builder(stack.dispatcher.url())
        .audiences(["show", "matinee"])
        .build()?;
    assert_eq!(only_show.verify(&token).await?, c);
    let only_other = Admission::builder(stack.dispatcher.url())
        .audiences(["other"])
        .build()?;
    assert!(matches!(
        only_other.verify(&token).await,
        Err(VerifyError::Audience)
    ));

    // A genuine token past its exp (beyond the clock-skew leeway).
    let key = dispatcher_key(&stack).await?;
    let expired = key.mint(&Claims {
        exp: genuine.iat.saturating_sub(60),
        ..genuine.clone()
    });
    assert!(matches!(
        a.verify(&expired).await,
        Err(VerifyError::Expired)
    ));
    // Forged: another signature, or a payload the key never signed.
    assert!(matches!(
        a.verify(&tampered(&token)).await,
        Err(VerifyError::Invalid(_))
    ));
    let kid = jsonwebtoken::decode_header(&token)?.kid.unwrap_or_default();
    let other_payload = unsigned(json!({"alg": "EdDSA", "typ": "JWT", "kid": kid}), &genuine)?;
    assert!(matches!(
        a.verify(&other_payload).await,
        Err(VerifyError::Invalid(_))
    ));
    assert!(matches!(
        a.verify(&stranger(&genuine)?).await,
        Err(VerifyError::Key(KeyError::Unknown))
    ));
    assert!(matches!(
        a.verify(&unsigned(json!({"alg": "HS256", "kid": kid}), &genuine)?)
            .await,
        Err(VerifyError::Algorithm)
    ));
    assert!(matches!(
        a.verify(&unsigned(json!({"alg": "EdDSA"}), &genuine)?)
            .await,
        Err(VerifyError::NoKid)
    ));
    assert!(matches!(
        a.verify("not-a-jwt").await,
        Err(VerifyError::Malformed(_))
    ));

    // Keys that cannot be fetched: the token cannot be judged (a 503, not the client's fault).
    let nowhere = format!("http://{}", free_addr()?);
    let blind = Admission::builder(&nowhere).audiences(["show"]).build()?;
    let e = blind.verify(&token).await.err();
    assert!(e.as_ref().is_some_and(VerifyError::is_unavailable), "{e:?}");
    assert!(!VerifyError::Expired.is_unavailable());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_kids_refresh_once_and_never_hold_up_a_valid_token() -> anyhow::Result<()> {
    let stack = stack().await?;
    let (_, token) = admitted(&stack, "show").await?;
    let genuine = claims(&token)?;
    let (relay, server) = JwksRelay::start(&stack).await?;
    // The least gap between two fetches (short: each unknown kid below waits for it).
    const GAP: Duration = Duration::from_millis(500);
    // Long enough that a fetch into the black hole is still under way when the test ends.
    let a = Admission::builder(stack.dispatcher.url())
        .audiences(["show"])
        .jwks_url(format!("{}/jwks", server.url()))
        .jwks_refresh(GAP, Duration::from_secs(300))
        .timeout(Duration::from_secs(120))
        .build()?;

    a.verify(&token).await?;
    a.verify(&token).await?;
    assert_eq!(relay.fetches(), 1, "the JWKS is fetched once, then cached");

    // An unknown kid waits for the next fetch, a gap after the last one, and is refused
    // once that fetch did not bring it.
    let unknown = stranger(&genuine)?;
    let asked = std::time::Instant::now();
    assert!(matches!(
        a.verify(&unknown).await,
        Err(VerifyError::Key(KeyError::Unknown))
    ));
    assert_eq!(relay.fetches(), 2, "one refresh for the unknown kid");
    assert!(asked.elapsed() < GAP * 4, "{:?}", asked.elapsed());

    // A burst of verifications of one new kid shares one refresh: the requests that arrive
    // while it is due or under way wait for it, and it answers them all.
    let burst = stranger(&genuine)?;
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let (a, t) = (a.clone(), burst.clone());
            tokio::spawn(async move { a.verify(&t).await })
        })
        .collect();
    for t in tasks {
        assert!(matches!(t.await?, Err(VerifyError::Key(KeyError::Unknown))));
    }
    let after_burst = relay.fetches();
    assert_eq!(after_burst, 3, "20 verifications of one kid cost one fetch");

    // The JWKS endpoint stops answering. A new unknown kid starts a refresh that hangs ...
    relay.hang.store(true, Ordering::SeqCst);
    let stuck = {
        let (a, t) = (a.clone(), stranger(&genuine)?);
        tokio::spawn(async move { a.verify(&t).await })
    };
    eventually("a refresh to start", async || {
        relay.fetches() != after_burst
    })
    .await?;
    // ... and a second one waits for that refresh instead of starting another.
    let waiting = {
        let (a, t) = (a.clone(), stranger(&genuine)?);
        tokio::spawn(async move { a.verify(&t).await })
    };
    // (Give it a moment to reach the single flight.)
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Meanwhile a valid token verifies: it never waits on the refresh for another kid. (The
    // timeout only turns a hang into a failure; the refresh cannot finish at all.)
    let valid = within("a valid token to verify", T, a.verify(&token)).await;
    assert!(matches!(valid, Ok(Ok(_))), "{valid:?}");
    assert!(!stuck.is_finished(), "the refresh is still under way");
    assert!(
        !waiting.is_finished(),
        "the second unknown kid waits for it"
    );
    assert_eq!(relay.fetches(), after_burst + 1, "one refresh at a time");
    stuck.abort();
    waiting.abort();
    Ok(())
}

/// `expires_at` of an active session.
fn active(s: SessionStatus) -> anyhow::Result<ActiveSession> {
    match s {
        SessionStatus::Active(a) => Ok(a),
        other => anyhow::bail!("not active: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_touch_and_release_follow_the_session() -> anyhow::Result<()> {
    let stack = stack().await?;
    let (ticket, token) = admitted(&stack, "show").await?;
    let place = ticket.split('.').nth(1).unwrap_or_default();
    let a = admission(&stack)?;

    let s = active(a.check(&token).await?)?;
    assert_eq!(
        (s.queue.as_str(), s.session.clone()),
        ("show", format!("show.{place}"))
    );
    let exp = claims(&token)?.exp as i64;
    assert!(
        s.expires_at.unix_timestamp() <= exp,
        "{s:?} past the cap {exp}"
    );
    assert!(s.expires_at > time::OffsetDateTime::now_utc());
    // A fixed session: a touch keeps the expiry.
    assert_eq!(active(a.touch(&token).await?)?, s);

    assert_eq!(a.release(&token).await?, SessionStatus::Ended);
    assert_eq!(
        stack.queue("show").await?["active"],
        0,
        "the slot frees at once"
    );
    assert_eq!(a.check(&token).await?, SessionStatus::Ended);
    assert_eq!(a.touch(&token).await?, SessionStatus::Ended);
    assert_eq!(a.release(&token).await?, SessionStatus::Ended, "idempotent");

    for bad in [tampered(&token), stranger(&claims(&token)?)?, "x".into()] {
        assert_eq!(a.check(&bad).await?, SessionStatus::Invalid);
        assert_eq!(a.touch(&bad).await?, SessionStatus::Invalid);
        assert_eq!(a.release(&bad).await?, SessionStatus::Invalid);
    }

    // No dispatcher: an error, not an answer about the session.
    let nowhere = Admission::builder(format!("http://{}", free_addr()?))
        .audiences(["show"])
        .build()?;
    assert!(matches!(
        nowhere.check(&token).await,
        Err(Error::Unreachable(_))
    ));
    assert!(matches!(
        nowhere.release(&token).await,
        Err(Error::Unreachable(_))
    ));
    // Load reports need the service token; without one nothing is sent.
    assert!(matches!(
        a.report_load("booking-main", 1.0).await,
        Err(Error::NoServiceToken)
    ));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sliding_session_is_touched_through_the_layer() -> anyhow::Result<()> {
    let stack = stack().await?;
    stack
        .put_queue(
            "slide",
            // A TTL of 6 s: the touch below (after 1.1 s, through a JWKS fetch) lands inside
            // it even on a loaded machine.
            json!({"admit_per_second": 50.0, "session_ttl_seconds": 6, "sliding_session": true,
                   "max_session_seconds": 30}),
        )
        .await?;
    let (_, token) = admitted(&stack, "slide").await?;
    let a = admission(&stack)?;
    let before = active(a.check(&token).await?)?.expires_at;
    // The demo's GET /api/seats is guarded by the layer in touching mode.
    let booking = stack.booking.as_ref().expect("booking").url();
    // Wall-clock time must pass for a touch to slide the expiry (`time_rules::` checks the
    // rule itself with a synthetic clock): a second past the admission.
    let ttl_ms = 1000
        * stack.queue("slide").await?["session_ttl_seconds"]
            .as_u64()
            .unwrap_or(0);
    let before_ms = u64::try_from(before.unix_timestamp_nanos() / 1_000_000)?;
    usher_testkit::wait::clock_past("a second past the admission", before_ms - ttl_ms + 1_000)
        .await?;
    let r = plain()
        .get(format!("{booking}/api/seats?queue=slide"))
        .bearer_auth(&token)
        .send()
        .await?;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await?;
    assert_eq!(v["queue"], "slide");
    let after = active(a.check(&token).await?)?.expires_at;
    assert!(
        after > before,
        "the guarded call slid the session: {after} > {before}"
    );
    assert_eq!(v["session_expires_at"], after.unix_timestamp());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_refuses_with_401_and_403_and_hands_over_the_claims() -> anyhow::Result<()> {
    let stack = stack().await?;
    let (ticket, token) = admitted(&stack, "show").await?;
    let place = ticket.split('.').nth(1).unwrap_or_default().to_owned();

    async fn private(
        Extension(c): Extension<AdmittedClaims>,
        Extension(s): Extension<ActiveSession>,
    ) -> Json<Value> {
        Json(json!({"sub": c.sub, "aud": c.aud, "session": s.session}))
    }
    let serve = |a: Admission| {
        let app: Router = Router::new()
            .route("/private", get(private))
            .route_layer(a.layer())
            .route("/public", get(|| async { "open" }));
        Server::spawn(|l, rx| async move {
            axum::serve(l, app)
                .with_graceful_shutdown(async move {
                    let _ = rx.await;
                })
                .await
        })
    };
    let guarded = serve(admission(&stack)?).await?;
    let get = |path: &str, token: Option<&str>| {
        let mut r = plain().get(format!("{}{path}", guarded.url()));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };

    assert_eq!(
        get("/public", None).await?.status(),
        200,
        "unguarded routes stay open"
    );
    let r = get("/private", None).await?;
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    json_error(r, 401).await?;
    let r = plain()
        .get(format!("{}/private", guarded.url()))
        .header("authorization", format!("Basic {token}"))
        .send()
        .await?;
    json_error(r, 401).await?;

    let genuine = claims(&token)?;
    let expired = dispatcher_key(&stack).await?.mint(&Claims {
        exp: genuine.iat.saturating_sub(60),
        ..genuine.clone()
    });
    for bad in [
        tampered(&token),
        stranger(&genuine)?,
        expired,
        "not-a-jwt".into(),
    ] {
        json_error(get("/private", Some(&bad)).await?, 403).await?;
    }

    let r = get("/private", Some(&token)).await?;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await?;
    assert_eq!(
        v,
        json!({"sub": place, "aud": "show", "session": format!("show.{place}")})
    );

    // Released: the offline check still passes (a genuine token within its cap), the online
    // one refuses.
    assert_eq!(
        admission(&stack)?.release(&token).await?,
        SessionStatus::Ended
    );
    let msg = json_error(get("/private", Some(&token)).await?, 403).await?;
    assert!(msg.contains("ended"), "{msg}");

    // Keys or dispatcher unreachable: 503, the token cannot be judged.
    let (_, other) = admitted(&stack, "show").await?;
    let nowhere = format!("http://{}", free_addr()?);
    let blind = serve(Admission::builder(&nowhere).audiences(["show"]).build()?).await?;
    let r = plain()
        .get(format!("{}/private", blind.url()))
        .bearer_auth(&other)
        .send()
        .await?;
    json_error(r, 503).await?;
    guarded.stop().await?;
    blind.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_refuses_a_second_booking_and_its_guarded_routes_after_it() -> anyhow::Result<()> {
    let stack = stack().await?;
    let (_, token) = admitted(&stack, "show").await?;
    let booking = stack.booking.as_ref().expect("booking").url();
    let seats = || {
        plain()
            .get(format!("{booking}/api/seats?queue=show"))
            .bearer_auth(&token)
            .send()
    };
    let book = || {
        plain()
            .post(format!("{booking}/api/bookings"))
            .bearer_auth(&token)
            .json(&json!({"queue": "show", "seat": "A1"}))
            .send()
    };
    assert_eq!(seats().await?.status(), 200);
    assert_eq!(book().await?.status(), 201);
    json_error(book().await?, 403).await?;
    json_error(seats().await?, 403).await?;
    let r = plain()
        .get(format!("{booking}/api/seats?queue=show"))
        .send()
        .await?;
    json_error(r, 401).await?;
    // Naming no queue is a bad request, whatever the token.
    let r = plain()
        .get(format!("{booking}/api/seats"))
        .bearer_auth(&token)
        .send()
        .await?;
    json_error(r, 400).await?;
    Ok(())
}

/// A client without credentials: what a booking service's visitors send (`Stack::http` carries
/// the admin token).
fn plain() -> reqwest::Client {
    reqwest::Client::new()
}
