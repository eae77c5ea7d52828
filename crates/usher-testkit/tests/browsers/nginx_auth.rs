//! deploy/nginx/booking-auth.conf with the real nginx: a booking upstream guarded by
//! `auth_request` against the dispatcher's `GET /api/session?queue=show`, so nobody goes around
//! the line, and a single-use booking location (`POST /api/session/consume?queue=show`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::any;
use axum::{Json, Router};
use serde_json::{json, Value};
use usher_mint::token::{Claims, SigningKey};
use usher_testkit::answers::json_error;
use usher_testkit::dpop::{bound_token, BrowserKey};
use usher_testkit::line::{admitted, claims, dispatcher_key};
use usher_testkit::nginx::{deploy_config, substitute, Nginx};
use usher_testkit::procs::free_addr;
use usher_testkit::stack::{Server, Stack, StackOptions};

/// What the upstream saw: one (Authorization, body) per request that reached it.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// A tiny real booking upstream: records each request and answers `200 {"booked": true}`.
async fn upstream() -> anyhow::Result<(Server, Seen)> {
    async fn record(State(seen): State<Seen>, headers: HeaderMap, body: String) -> Json<Value> {
        let auth = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        seen.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((auth, body));
        Json(json!({"booked": true}))
    }
    let seen = Seen::default();
    let app = Router::new().fallback(any(record)).with_state(seen.clone());
    let server = Server::spawn(|l, rx| async move {
        axum::serve(l, app)
            .with_graceful_shutdown(async move {
                let _ = rx.await;
            })
            .await
    })
    .await?;
    Ok((server, seen))
}

/// The example config, pointed at this test's dispatcher and upstream, listening on `listen`.
fn config(
    dispatcher: SocketAddr,
    booking: SocketAddr,
    listen: SocketAddr,
) -> anyhow::Result<String> {
    let conf = deploy_config("booking-auth.conf")?;
    let conf = substitute(
        &conf,
        "server 127.0.0.1:8081;",
        &format!("server {dispatcher};"),
    )?;
    let conf = substitute(
        &conf,
        "server 127.0.0.1:8082;",
        &format!("server {booking};"),
    )?;
    let conf = substitute(&conf, "listen 8090;", &format!("listen {listen};"))?;
    // One worker is plenty on loopback.
    substitute(&conf, "worker_processes auto;", "worker_processes 1;")
}

/// The example config in front of `stack`'s dispatcher and a fresh booking upstream.
async fn nginx_for(stack: &Stack) -> anyhow::Result<(Server, Seen, Nginx)> {
    let (upstream, seen) = upstream().await?;
    let listen = free_addr()?;
    let nginx = Nginx::start(
        &config(stack.dispatcher.addr, upstream.addr, listen)?,
        listen,
    )
    .await?;
    Ok((upstream, seen, nginx))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_lets_only_active_sessions_through_to_the_booking_service() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    stack.create_queue("show", 50.0).await?;
    let (upstream, seen, nginx) = nginx_for(&stack).await?;
    let book = |auth: Option<String>| {
        let mut r = reqwest::Client::new()
            .post(format!("{}/api/bookings", nginx.url()))
            .json(&json!({"queue": "show", "seat": "A1"}));
        if let Some(a) = auth {
            r = r.header("authorization", a);
        }
        r.send()
    };

    // No token, a token that is not one, a forged one, one of another key: 401.
    let (_, token) = admitted(&stack, "show").await?;
    let genuine = claims(&token)?;
    let mut tampered = token.clone();
    let last = tampered.pop().unwrap_or('A');
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    let stranger = SigningKey::from_pkcs8_pem(&SigningKey::generate_pem()?)?.mint(&genuine);
    let r = book(None).await?;
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    json_error(r, 401).await?;
    for bad in ["not-a-jwt".to_owned(), tampered, stranger] {
        json_error(book(Some(format!("Bearer {bad}"))).await?, 401).await?;
    }
    assert!(
        seen.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty(),
        "nothing got through"
    );

    // An admitted token passes, with its header and the request body intact.
    let r = book(Some(format!("Bearer {token}"))).await?;
    assert_eq!(r.status(), 200, "{:?}", nginx.log());
    assert_eq!(r.json::<Value>().await?["booked"], true);
    {
        let seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].0, format!("Bearer {token}"));
        let body: Value = serde_json::from_str(&seen[0].1)?;
        assert_eq!(body, json!({"queue": "show", "seat": "A1"}));
    }
    // The subrequest is internal: a client cannot call it.
    let r = reqwest::Client::new()
        .get(format!("{}/_usher/session", nginx.url()))
        .send()
        .await?;
    assert_eq!(r.status(), 404);

    // The booking consumed the session (the single-use location); a release changes nothing
    // (204 every time): 403 from then on.
    let r = reqwest::Client::new()
        .delete(format!("{}/api/session", stack.dispatcher.url()))
        .bearer_auth(&token)
        .send()
        .await?;
    assert_eq!(r.status(), 204);
    json_error(book(Some(format!("Bearer {token}"))).await?, 403).await?;

    // A genuine token past its exp: the session has ended, 403.
    let (_, other) = admitted(&stack, "show").await?;
    let past = dispatcher_key(&stack).await?.mint(&Claims {
        exp: claims(&other)?.iat.saturating_sub(60),
        ..claims(&other)?
    });
    json_error(book(Some(format!("Bearer {past}"))).await?, 403).await?;
    assert_eq!(
        seen.lock().unwrap_or_else(PoisonError::into_inner).len(),
        1,
        "only the admitted request reached the booking service"
    );

    // With the dispatcher gone, nothing passes: 503, not the upstream.
    stack.dispatcher.stop().await?;
    json_error(book(Some(format!("Bearer {other}"))).await?, 503).await?;
    assert_eq!(seen.lock().unwrap_or_else(PoisonError::into_inner).len(), 1);
    drop(nginx);
    upstream.stop().await
}

/// The example's queue is `show`: a token of another queue is refused, and its single-use
/// location (`POST /api/bookings`, which ends the session as it lets the request through)
/// lets exactly one of many concurrent bookings with one token reach the booking service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_refuses_other_queues_tokens_and_lets_one_booking_through() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    stack.create_queue("show", 50.0).await?;
    stack.create_queue("quiet", 50.0).await?;
    let (upstream, seen, nginx) = nginx_for(&stack).await?;
    let http = reqwest::Client::new();
    let seats = |token: &str| {
        http.get(format!("{}/api/seats", nginx.url()))
            .bearer_auth(token)
            .send()
    };
    let book = |token: &str| {
        http.post(format!("{}/api/bookings", nginx.url()))
            .bearer_auth(token)
            .json(&json!({"queue": "show", "seat": "A1"}))
            .send()
    };

    // A quiet queue's token, genuine and active, is not the show's.
    let (_, quiet) = admitted(&stack, "quiet").await?;
    json_error(seats(&quiet).await?, 403).await?;
    json_error(book(&quiet).await?, 403).await?;
    let seen_len = || seen.lock().unwrap_or_else(PoisonError::into_inner).len();
    assert_eq!(seen_len(), 0, "nothing got through: {}", nginx.log());

    // The show's token browses, then books once whatever the number of tries.
    let (_, token) = admitted(&stack, "show").await?;
    assert_eq!(seats(&token).await?.status(), 200);
    let tries: Vec<_> = (0..10).map(|_| book(&token)).collect();
    let mut statuses = Vec::new();
    for r in futures::future::join_all(tries).await {
        statuses.push(r?.status().as_u16());
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        1,
        "{statuses:?}"
    );
    assert!(
        statuses.iter().all(|s| matches!(s, 200 | 403)),
        "{statuses:?}"
    );
    assert_eq!(seen_len(), 2, "one browse and one booking reached it");
    // The session ended with the booking.
    json_error(seats(&token).await?, 403).await?;
    drop(nginx);
    upstream.stop().await
}

/// The single-use location takes every spelling of the booking path a lenient booking
/// service routes to its booking handler (this upstream answers every path, as Express or
/// ASP.NET would with their defaults): with one token, however the path is written, one
/// request reaches the booking service (a security review booked four times through
/// `/api/bookings/`, `/API/bookings` and `/Api/Bookings/` around an exact-match location).
/// A path with `;` parameters is refused (Java servers route `/api;x/bookings` as the
/// booking), and paths below the booking's are browsed with the session, not booked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_books_once_whatever_the_spelling_of_the_booking_path() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    stack.create_queue("show", 50.0).await?;
    let (upstream, seen, nginx) = nginx_for(&stack).await?;
    let http = reqwest::Client::new();
    let seen_len = || seen.lock().unwrap_or_else(PoisonError::into_inner).len();
    let spellings = [
        "/api/bookings/",
        "/API/bookings",
        "/Api/Bookings/",
        "/api/bookings.json",
        "/api//bookings",
        "/api/%62ookings",
        "/api/bookings",
    ];
    for first in spellings {
        let (_, token) = admitted(&stack, "show").await?;
        let before = seen_len();
        let mut statuses = Vec::new();
        // The spelling under test first, then every other one with the same token.
        for path in std::iter::once(first).chain(spellings.iter().copied()) {
            let r = http
                .post(format!("{}{path}", nginx.url()))
                .bearer_auth(&token)
                .json(&json!({"queue": "show", "seat": "A1"}))
                .send()
                .await?;
            statuses.push((path, r.status().as_u16()));
        }
        assert_eq!(statuses[0].1, 200, "{first}: {statuses:?}");
        assert!(
            statuses[1..].iter().all(|(_, s)| *s == 403),
            "{first}: {statuses:?}"
        );
        assert_eq!(seen_len() - before, 1, "{first}: one booking reached it");
    }
    // Path parameters, which Java servers drop before routing: refused, nothing spent.
    let (_, token) = admitted(&stack, "show").await?;
    let before = seen_len();
    for path in [
        "/api;x/bookings",
        "/api/bookings;x",
        "/;x/api/bookings",
        "/api/bookings%3Bx",
    ] {
        let r = http
            .post(format!("{}{path}", nginx.url()))
            .bearer_auth(&token)
            .send()
            .await?;
        json_error(r, 400).await?;
    }
    // What lies below the booking path is browsed, not booked: the session stays.
    let r = http
        .get(format!("{}/api/bookings/quote", nginx.url()))
        .bearer_auth(&token)
        .send()
        .await?;
    assert_eq!(r.status(), 200);
    let r = http
        .post(format!("{}/api/bookings", nginx.url()))
        .bearer_auth(&token)
        .send()
        .await?;
    assert_eq!(r.status(), 200, "the session was still there to book with");
    assert_eq!(seen_len() - before, 2, "the quote and the booking");
    drop(nginx);
    upstream.stop().await
}

/// A token bound to the browser's key (`cnf.jkt`, a queue with `bind: "browser_key"`) passes
/// only with a fresh proof of that key in the `DPoP` header, made for the request the browser
/// sent (nginx passes its method and URL, without query, to the dispatcher): a copied token
/// alone reaches nothing, and its own browser browses and books once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_refuses_a_copied_bound_token_and_books_once_with_its_proof() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    stack.create_queue("show", 50.0).await?;
    let (upstream, seen, nginx) = nginx_for(&stack).await?;
    let (key, thief) = (BrowserKey::generate(), BrowserKey::generate());
    let (_, token) = admitted(&stack, "show").await?;
    let bound = bound_token(&dispatcher_key(&stack).await?, &token, &key.thumbprint())?;
    let http = reqwest::Client::new();
    let (seats_url, book_url) = (
        format!("{}/api/seats", nginx.url()),
        format!("{}/api/bookings", nginx.url()),
    );
    let seats = |proof: Option<String>| {
        let mut r = http
            .get(format!("{seats_url}?queue=show"))
            .bearer_auth(&bound);
        if let Some(p) = proof {
            r = r.header("dpop", p);
        }
        r.send()
    };
    let book = |proof: Option<String>| {
        let mut r = http
            .post(&book_url)
            .bearer_auth(&bound)
            .json(&json!({"queue": "show", "seat": "A1"}));
        if let Some(p) = proof {
            r = r.header("dpop", p);
        }
        r.send()
    };
    let seen_len = || seen.lock().unwrap_or_else(PoisonError::into_inner).len();

    // The copied token alone, or with a thief's proof, or with its key's proof for another
    // request: 401, nothing reaches the booking service.
    json_error(book(None).await?, 401).await?;
    json_error(seats(None).await?, 401).await?;
    json_error(
        book(Some(thief.proof("POST", &book_url, Some(&bound)))).await?,
        401,
    )
    .await?;
    json_error(
        book(Some(key.proof("GET", &book_url, Some(&bound)))).await?,
        401,
    )
    .await?;
    json_error(
        book(Some(key.proof("POST", &seats_url, Some(&bound)))).await?,
        401,
    )
    .await?;
    assert_eq!(seen_len(), 0, "nothing got through: {}", nginx.log());

    // Its browser browses (the proof's URL has no query) and books, each request with its
    // own proof; the booking service gets the proof too.
    let r = seats(Some(key.proof("GET", &seats_url, Some(&bound)))).await?;
    assert_eq!(r.status(), 200, "{}", nginx.log());
    let once = key.proof("POST", &book_url, Some(&bound));
    let r = book(Some(once.clone())).await?;
    assert_eq!(r.status(), 200, "{}", nginx.log());
    assert_eq!(r.json::<Value>().await?["booked"], true);
    assert_eq!(seen_len(), 2, "one browse and one booking reached it");
    // The same proof again is a replay (401); a fresh one finds the session consumed (403).
    json_error(book(Some(once)).await?, 401).await?;
    json_error(
        book(Some(key.proof("POST", &book_url, Some(&bound)))).await?,
        403,
    )
    .await?;
    assert_eq!(seen_len(), 2, "one booking");
    drop(nginx);
    upstream.stop().await
}
