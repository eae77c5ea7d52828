//! The dispatcher's session API and tokens bound to the browser's key (issue 23: a copied
//! bound token alone consumed the session). A token with `cnf.jkt` is answered only with a
//! proof of that key in the `DPoP` header, made for the request the browser sent (named by
//! `X-Original-Method` and `X-Original-URL`, as an `auth_request` proxy passes them) and for
//! this token (`ath`), spent once; a token without `cnf` needs none, as before.
//!
//! The bound token is the one a binding queue would have minted for the same admission: the
//! admitted token signed again by the dispatcher's key with `cnf.jkt` added (the dispatcher
//! judges the token's claims, not the queue's setting).

use reqwest::{Method, Response};
use usher_admission::{Admission, Consumption, Proof, SessionStatus};
use usher_testkit::answers::json_error;
use usher_testkit::dpop::{bound_token, BrowserKey};
use usher_testkit::line::{admitted, dispatcher_key};
use usher_testkit::stack::{Stack, StackOptions};

/// What the browser asked the booking site, as the proxy passes it on.
const BOOK: (&str, &str) = ("POST", "https://tickets.example/api/bookings");

/// One call of the session API (`path` below `/api/session`, `?queue=show`) with `token`,
/// `dpop` as the `DPoP` header and `original` as `X-Original-Method` and `X-Original-URL`.
async fn call(
    stack: &Stack,
    method: Method,
    path: &str,
    token: &str,
    dpop: Option<&str>,
    original: Option<(&str, &str)>,
) -> anyhow::Result<Response> {
    let mut r = reqwest::Client::new()
        .request(
            method,
            format!("{}/api/session{path}?queue=show", stack.dispatcher.url()),
        )
        .bearer_auth(token);
    if let Some(p) = dpop {
        r = r.header("dpop", p);
    }
    if let Some((m, u)) = original {
        r = r.header("x-original-method", m).header("x-original-url", u);
    }
    Ok(r.send().await?)
}

async fn consume(
    stack: &Stack,
    token: &str,
    dpop: Option<&str>,
    original: Option<(&str, &str)>,
) -> anyhow::Result<Response> {
    call(stack, Method::POST, "/consume", token, dpop, original).await
}

/// A refusal: `401` whose error names `reason`.
async fn refused(r: Response, reason: &str) -> anyhow::Result<()> {
    let msg = json_error(r, 401).await?;
    assert!(msg.contains(reason), "{reason:?} expected in {msg:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_token_consumes_its_session_only_with_a_fresh_proof_of_its_key(
) -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    stack.create_queue("show", 50.0).await?;
    let (key, thief) = (BrowserKey::generate(), BrowserKey::generate());
    let (_, token) = admitted(&stack, "show").await?;
    let bound = bound_token(&dispatcher_key(&stack).await?, &token, &key.thumbprint())?;
    let (htm, htu) = BOOK;

    // A copied token alone, or with a proof that is not its browser's for this request and
    // this token: refused, and the session stays.
    refused(consume(&stack, &bound, None, Some(BOOK)).await?, "missing").await?;
    let thiefs = thief.proof(htm, htu, Some(&bound));
    refused(
        consume(&stack, &bound, Some(&thiefs), Some(BOOK)).await?,
        "wrong_key",
    )
    .await?;
    for (what, proof) in [
        (
            "another URL",
            key.proof(htm, "https://evil.example/api/bookings", Some(&bound)),
        ),
        ("another method", key.proof("GET", htu, Some(&bound))),
        ("another token", key.proof(htm, htu, Some(&token))),
        ("no token hash", key.proof(htm, htu, None)),
        ("not a JWS", "not.a.proof".to_owned()),
    ] {
        let r = consume(&stack, &bound, Some(&proof), Some(BOOK)).await?;
        let msg = json_error(r, 401).await?;
        assert!(msg.contains("invalid"), "{what}: {msg}");
    }
    let old = key.proof_with(serde_json::json!({
        "jti": "old-1", "iat": usher_core::time::now_ms() / 1000 - 120,
        "htm": htm, "htu": htu, "ath": usher_testkit::dpop::ath(&bound),
    }));
    refused(
        consume(&stack, &bound, Some(&old), Some(BOOK)).await?,
        "expired",
    )
    .await?;
    // A good proof, but the proxy did not say which request it is for.
    let good = key.proof(htm, htu, Some(&bound));
    refused(consume(&stack, &bound, Some(&good), None).await?, "invalid").await?;

    // With its key's proof for this request: 200, once; the same proof again is a replay.
    let good = key.proof(htm, htu, Some(&bound));
    let r = consume(&stack, &bound, Some(&good), Some(BOOK)).await?;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    refused(
        consume(&stack, &bound, Some(&good), Some(BOOK)).await?,
        "replayed",
    )
    .await?;
    // A fresh proof finds the session ended.
    let fresh = key.proof(htm, htu, Some(&bound));
    json_error(
        consume(&stack, &bound, Some(&fresh), Some(BOOK)).await?,
        410,
    )
    .await?;

    // A token without `cnf` needs no proof, as before.
    let (_, plain) = admitted(&stack, "show").await?;
    assert_eq!(consume(&stack, &plain, None, None).await?.status(), 200);
    Ok(())
}

/// Every session route asks a bound token for its proof: the status check, the touch and the
/// release, each proof for its own request and spent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_session_route_asks_a_bound_token_for_its_proof() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    stack.create_queue("show", 50.0).await?;
    let key = BrowserKey::generate();
    let (_, token) = admitted(&stack, "show").await?;
    let bound = bound_token(&dispatcher_key(&stack).await?, &token, &key.thumbprint())?;
    let seats = ("GET", "https://tickets.example/api/seats");

    for (method, path) in [
        (Method::GET, ""),
        (Method::POST, "/touch"),
        (Method::DELETE, ""),
    ] {
        let r = call(&stack, method.clone(), path, &bound, None, Some(seats)).await?;
        refused(r, "missing").await?;
        let proof = key.proof(seats.0, seats.1, Some(&bound));
        let r = call(
            &stack,
            method.clone(),
            path,
            &bound,
            Some(&proof),
            Some(seats),
        )
        .await?;
        let want = if method == Method::DELETE { 204 } else { 200 };
        assert_eq!(r.status(), want, "{method} {path}: {:?}", r.text().await);
        let r = call(
            &stack,
            method.clone(),
            path,
            &bound,
            Some(&proof),
            Some(seats),
        )
        .await?;
        refused(r, "replayed").await?;
    }
    Ok(())
}

/// `usher-admission` passes the browser's proof on (`check_bound`, `consume_bound`): the
/// plain calls hear why a bound token is refused, and the demo booking service books a bound
/// token once, with the browser's `DPoP` proof, which it checks and then hands to the
/// dispatcher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usher_admission_and_the_demo_pass_the_browsers_proof_on() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions {
        booking: true,
        ..Default::default()
    })
    .await?;
    stack.create_queue("show", 50.0).await?;
    let (key, thief) = (BrowserKey::generate(), BrowserKey::generate());
    let (_, token) = admitted(&stack, "show").await?;
    let bound = bound_token(&dispatcher_key(&stack).await?, &token, &key.thumbprint())?;
    let admission = Admission::builder(stack.dispatcher.url())
        .any_queue()
        .build()?;
    let seats = "https://tickets.example/api/seats";
    let proof = |jws| Proof {
        jws,
        method: "GET",
        url: seats,
    };

    // The plain call, and a thief's proof: refused, with the reason.
    assert_eq!(
        admission.check_for(&bound, "show").await?,
        SessionStatus::ProofRefused("missing".into())
    );
    let thiefs = thief.proof("GET", seats, Some(&bound));
    assert_eq!(
        admission
            .consume_bound(&bound, "show", proof(&thiefs))
            .await?,
        Consumption::ProofRefused("wrong_key".into())
    );
    // Its browser's proof answers once.
    let good = key.proof("GET", seats, Some(&bound));
    assert!(matches!(
        admission.check_bound(&bound, "show", proof(&good)).await?,
        SessionStatus::Active(_)
    ));
    assert_eq!(
        admission.check_bound(&bound, "show", proof(&good)).await?,
        SessionStatus::ProofRefused("replayed".into())
    );

    // The demo books it only with the browser's proof of this booking request, once.
    let booking = stack.booking.as_ref().map(|b| b.url()).unwrap_or_default();
    let url = format!("{booking}/api/bookings");
    let book = |dpop: Option<String>| {
        let mut r = reqwest::Client::new()
            .post(&url)
            .bearer_auth(&bound)
            .json(&serde_json::json!({"queue": "show"}));
        if let Some(p) = dpop {
            r = r.header("dpop", p);
        }
        r.send()
    };
    let msg = json_error(book(None).await?, 401).await?;
    assert!(msg.contains("bound"), "{msg}");
    json_error(
        book(Some(thief.proof("POST", &url, Some(&bound)))).await?,
        403,
    )
    .await?;
    let r = book(Some(key.proof("POST", &url, Some(&bound)))).await?;
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    let msg = json_error(
        book(Some(key.proof("POST", &url, Some(&bound)))).await?,
        403,
    )
    .await?;
    assert!(msg.contains("ended"), "{msg}");
    Ok(())
}

/// The holder of a bound token's key can sign fresh proofs without end, and each one spent
/// is kept 130 s in Redis: the dispatcher spends at most `SESSION_PROOFS` (60 at once, then 5
/// a second) of one session, answers `429` with `Retry-After` past it, and spends nothing for
/// a refused call. Another session is still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_session_spends_a_bounded_number_of_proofs() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    stack.create_queue("show", 50.0).await?;
    let key = BrowserKey::generate();
    let signer = dispatcher_key(&stack).await?;
    let (_, token) = admitted(&stack, "show").await?;
    let bound = bound_token(&signer, &token, &key.thumbprint())?;
    let seats = ("GET", "https://tickets.example/api/seats");

    let started = std::time::Instant::now();
    let (mut served, mut refused_at) = (0u64, None);
    for _ in 0..150 {
        let proof = key.proof(seats.0, seats.1, Some(&bound));
        let r = call(&stack, Method::GET, "", &bound, Some(&proof), Some(seats)).await?;
        match r.status().as_u16() {
            200 => served += 1,
            429 => {
                let wait = r
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok());
                assert!(wait.is_some_and(|s| s >= 1), "Retry-After: {wait:?}");
                json_error(r, 429).await?;
                refused_at.get_or_insert(served);
            }
            other => anyhow::bail!("unexpected {other}: {:?}", r.text().await),
        }
    }
    let elapsed = started.elapsed().as_secs() + 1;
    let refused_at = refused_at.ok_or_else(|| {
        anyhow::anyhow!("150 calls in {elapsed} s: none was refused ({served} served)")
    })?;
    assert!(refused_at >= 60, "the burst is served first: {refused_at}");
    let bound_served = 60 + 5 * elapsed;
    assert!(
        served <= bound_served,
        "{served} served in {elapsed} s, at most {bound_served}"
    );
    let spent = usher_testkit::dpop::spent_proofs(&stack.redis.url(), "show").await?;
    assert!(
        spent as u64 <= served,
        "only served calls spend a proof: {spent} spent, {served} served"
    );

    // Another session of the same queue has its own share.
    let (_, other) = admitted(&stack, "show").await?;
    let other = bound_token(&signer, &other, &key.thumbprint())?;
    let proof = key.proof(seats.0, seats.1, Some(&other));
    let r = call(&stack, Method::GET, "", &other, Some(&proof), Some(seats)).await?;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    Ok(())
}
