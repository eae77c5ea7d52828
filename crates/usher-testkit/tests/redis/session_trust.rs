//! Trust in an admission, as an attacker tests it (issue 23, findings 3, 4, 8 and 9): one
//! admission books once (`POST /api/session/consume`, one Redis script deciding), a token is
//! good only for its own queue (`?queue=`), secrets shorter than 32 characters stop the
//! dispatcher at start, and random key ids cannot keep a booking service fetching the JWKS.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::routing::post;
use axum::Router;
use reqwest::Response;
use serde_json::{json, Value};
use usher_admission::{Admission, BuildError, Consumption, KeyError, SessionStatus, VerifyError};
use usher_mint::token::SigningKey;
use usher_testkit::answers::json_error;
use usher_testkit::jwks_relay::JwksRelay;
use usher_testkit::line::{admitted, claims};
use usher_testkit::procs::{binary, free_addr};
use usher_testkit::stack::{Server, Stack, StackOptions};
use usher_testkit::wait::{eventually, within};
use usher_testkit::RedisServer;

/// A stack with the demo booking service and two queues: `busy`, whose line does not move
/// (paused), and `quiet`, whose passthrough admits at once.
async fn stack() -> anyhow::Result<Stack> {
    let stack = Stack::start(StackOptions {
        booking: true,
        tick_ms: 100,
        ..Default::default()
    })
    .await?;
    stack
        .put_queue("busy", json!({"admit_per_second": 1.0, "paused": true}))
        .await?;
    stack.create_queue("quiet", 50.0).await?;
    Ok(stack)
}

/// A client without credentials, as a booking service's visitors (and attackers) are.
fn plain() -> reqwest::Client {
    reqwest::Client::new()
}

/// `POST /api/session/consume` on the dispatcher, with `?queue=` when given.
async fn consume(stack: &Stack, token: &str, queue: Option<&str>) -> anyhow::Result<Response> {
    let mut r = plain()
        .post(format!("{}/api/session/consume", stack.dispatcher.url()))
        .bearer_auth(token);
    if let Some(q) = queue {
        r = r.query(&[("queue", q)]);
    }
    Ok(r.send().await?)
}

/// `GET /api/session` on the dispatcher, with `?queue=` when given.
async fn check(stack: &Stack, token: &str, queue: Option<&str>) -> anyhow::Result<Response> {
    let mut r = plain()
        .get(format!("{}/api/session", stack.dispatcher.url()))
        .bearer_auth(token);
    if let Some(q) = queue {
        r = r.query(&[("queue", q)]);
    }
    Ok(r.send().await?)
}

/// The statuses of `n` copies of `call` sent at once.
async fn at_once<F, Fut>(n: usize, call: F) -> anyhow::Result<Vec<u16>>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = reqwest::Result<Response>> + Send + 'static,
{
    let tasks: Vec<_> = (0..n).map(|_| tokio::spawn(call())).collect();
    let mut statuses = Vec::with_capacity(n);
    for t in tasks {
        statuses.push(t.await??.status().as_u16());
    }
    Ok(statuses)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_ends_a_session_once_whoever_asks_at_the_same_time() -> anyhow::Result<()> {
    let stack = stack().await?;
    let (ticket, token) = admitted(&stack, "quiet").await?;
    let place = ticket.split('.').nth(1).unwrap_or_default().to_owned();
    let url = format!("{}/api/session/consume", stack.dispatcher.url());
    let statuses = at_once(20, || plain().post(&url).bearer_auth(&token).send()).await?;
    let won = statuses.iter().filter(|s| **s == 200).count();
    let gone = statuses.iter().filter(|s| **s == 410).count();
    assert_eq!((won, gone), (1, 19), "{statuses:?}");
    assert_eq!(stack.queue("quiet").await?["active"], 0, "the slot is free");

    // Later calls: ended. The plain release stays idempotent.
    json_error(consume(&stack, &token, None).await?, 410).await?;
    json_error(check(&stack, &token, None).await?, 410).await?;
    let r = plain()
        .delete(format!("{}/api/session", stack.dispatcher.url()))
        .bearer_auth(&token)
        .send()
        .await?;
    assert_eq!(r.status(), 204);

    // The winner is told which session it ended.
    let (_, other) = admitted(&stack, "quiet").await?;
    let r = consume(&stack, &other, Some("quiet")).await?;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["cache-control"], "no-store");
    let v: Value = r.json().await?;
    assert_eq!(v["queue"], "quiet");
    assert_eq!(v["session"], claims(&other)?.jti);
    assert!(v["expires_at"].as_str().is_some_and(|s| s.ends_with('Z')));
    assert_ne!(v["session"], format!("quiet.{place}"));
    // A token this dispatcher never signed ends nothing.
    json_error(consume(&stack, "not-a-jwt", None).await?, 401).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_concurrent_bookings_with_one_token_make_one_booking() -> anyhow::Result<()> {
    let stack = stack().await?;
    let (_, token) = admitted(&stack, "quiet").await?;
    let booking = stack.booking.as_ref().expect("booking").url();
    let url = format!("{booking}/api/bookings");
    let statuses = at_once(30, || {
        plain()
            .post(&url)
            .bearer_auth(&token)
            .json(&json!({"queue": "quiet", "seat": "A1"}))
            .send()
    })
    .await?;
    let booked = statuses.iter().filter(|s| **s == 201).count();
    assert_eq!(booked, 1, "one admission, one booking: {statuses:?}");
    assert!(
        statuses.iter().all(|s| matches!(s, 201 | 403)),
        "the others are refused: {statuses:?}"
    );
    assert_eq!(stack.queue("quiet").await?["active"], 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_queues_token_is_refused_by_the_busy_queues_checks() -> anyhow::Result<()> {
    let stack = stack().await?;
    // Joining the busy queue gets a place in line, not a token; the quiet one admits at once.
    let (_, token) = admitted(&stack, "quiet").await?;
    assert_eq!(claims(&token)?.aud, "quiet");

    // The dispatcher: another queue's active session is refused, and left as it was.
    let msg = json_error(check(&stack, &token, Some("busy")).await?, 403).await?;
    assert!(msg.contains("queue"), "{msg}");
    json_error(consume(&stack, &token, Some("busy")).await?, 403).await?;
    assert_eq!(check(&stack, &token, Some("quiet")).await?.status(), 200);
    let twice = plain()
        .get(format!(
            "{}/api/session?queue=quiet&queue=busy",
            stack.dispatcher.url()
        ))
        .bearer_auth(&token)
        .send()
        .await?;
    json_error(twice, 400).await?;

    // The demo booking service: its routes take the queue.
    let booking = stack.booking.as_ref().expect("booking").url();
    let seats = |queue: &'static str| {
        plain()
            .get(format!("{booking}/api/seats"))
            .query(&[("queue", queue)])
            .bearer_auth(&token)
            .send()
    };
    json_error(seats("busy").await?, 403).await?;
    let r = plain()
        .post(format!("{booking}/api/bookings"))
        .bearer_auth(&token)
        .json(&json!({"queue": "busy", "seat": "A1"}))
        .send()
        .await?;
    assert!(matches!(r.status().as_u16(), 401 | 403), "{}", r.status());
    let r = seats("quiet").await?;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await?["queue"], "quiet");
    assert_eq!(stack.queue("quiet").await?["active"], 1, "still active");

    // usher-admission: the busy queue's booking service refuses the token offline and online.
    let busy = Admission::builder(stack.dispatcher.url())
        .audiences(["busy"])
        .build()?;
    assert!(matches!(
        busy.verify(&token).await,
        Err(VerifyError::Audience)
    ));
    assert_eq!(busy.check(&token).await?, SessionStatus::OtherQueue);
    assert_eq!(busy.touch(&token).await?, SessionStatus::OtherQueue);
    assert_eq!(busy.consume(&token).await?, Consumption::OtherQueue);
    let any = Admission::builder(stack.dispatcher.url())
        .any_queue()
        .build()?;
    assert_eq!(
        any.check_for(&token, "busy").await?,
        SessionStatus::OtherQueue
    );
    assert!(matches!(
        any.check_for(&token, "quiet").await?,
        SessionStatus::Active(_)
    ));
    // No queue named: no handle that could judge tokens.
    assert!(matches!(
        Admission::builder(stack.dispatcher.url()).build(),
        Err(BuildError::NoAudience)
    ));
    assert_eq!(stack.queue("quiet").await?["active"], 1, "still active");

    // The quiet queue's own service consumes it, once.
    let quiet = Admission::builder(stack.dispatcher.url())
        .audiences(["quiet"])
        .build()?;
    assert!(matches!(
        quiet.consume(&token).await?,
        Consumption::Consumed(s) if s.queue == "quiet"
    ));
    assert_eq!(quiet.consume(&token).await?, Consumption::Ended);
    Ok(())
}

/// Serves `POST /book` behind `layer`, as a booking service guards its booking route.
async fn guarded(layer: usher_admission::AdmissionLayer) -> anyhow::Result<Server> {
    let app: Router = Router::new()
        .route("/book", post(|| async { "booked" }))
        .route_layer(layer);
    Server::spawn(|l, rx| async move {
        axum::serve(l, app)
            .with_graceful_shutdown(async move {
                let _ = rx.await;
            })
            .await
    })
    .await
}

/// A queue taken from the request is one the handle sells, or the token is refused whatever
/// its own queue; and a handle for any queue must be told the queue (a security review's
/// findings: a busy queue's route that named the queue per request took a quiet queue's
/// token, and so did one whose `any_queue` handle was asked without a queue).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_named_by_the_request_must_be_one_the_service_sells() -> anyhow::Result<()> {
    let stack = stack().await?;
    let (_, token) = admitted(&stack, "quiet").await?;
    let book = |server: &Server, queue: &str| {
        plain()
            .post(format!("{}/book", server.url()))
            .query(&[("queue", queue)])
            .bearer_auth(&token)
            .send()
    };

    // The busy queue's service, its queue taken from the request: `?queue=quiet` is no way in.
    let busy = Admission::builder(stack.dispatcher.url())
        .audiences(["busy"])
        .build()?;
    assert!(matches!(
        busy.verify_for(&token, "quiet").await,
        Err(VerifyError::Audience)
    ));
    assert_eq!(
        busy.check_for(&token, "quiet").await?,
        SessionStatus::OtherQueue
    );
    assert_eq!(
        busy.consume_for(&token, "quiet").await?,
        Consumption::OtherQueue
    );
    let server = guarded(busy.layer().queue_from_query("queue")).await?;
    let msg = json_error(book(&server, "quiet").await?, 403).await?;
    assert!(msg.contains("queue"), "{msg}");
    json_error(book(&server, "busy").await?, 403).await?;
    server.stop().await?;

    // A handle for any queue, asked without one: an error, never an answer for any queue.
    let any = Admission::builder(stack.dispatcher.url())
        .any_queue()
        .build()?;
    assert!(matches!(
        any.verify(&token).await,
        Err(VerifyError::QueueRequired)
    ));
    assert!(matches!(
        any.check(&token).await,
        Err(usher_admission::Error::QueueRequired)
    ));
    assert!(matches!(
        any.consume(&token).await,
        Err(usher_admission::Error::QueueRequired)
    ));
    let server = guarded(any.layer()).await?;
    let msg = json_error(book(&server, "busy").await?, 500).await?;
    assert!(msg.contains("misconfigured"), "{msg}");
    server.stop().await?;
    assert!(matches!(
        any.release(&token).await,
        Err(usher_admission::Error::QueueRequired)
    ));
    assert_eq!(
        any.release_for(&token, "busy").await?,
        SessionStatus::OtherQueue
    );
    // Told the queue, it judges the token for that queue, named once.
    let server = guarded(any.layer().queue_from_query("queue")).await?;
    json_error(book(&server, "busy").await?, 403).await?;
    let twice = plain()
        .post(format!("{}/book?queue=quiet&queue=busy", server.url()))
        .bearer_auth(&token)
        .send()
        .await?;
    let msg = json_error(twice, 400).await?;
    assert!(msg.contains("more than once"), "{msg}");
    assert_eq!(
        stack.queue("quiet").await?["active"],
        1,
        "nothing consumed it"
    );
    let r = book(&server, "quiet").await?;
    assert_eq!(r.status(), 200);
    server.stop().await?;
    Ok(())
}

/// Runs the dispatcher binary with `env` (and a Redis) and returns what it wrote to stderr
/// once it exited unsuccessfully. A dispatcher that starts serving instead fails the test
/// (`within` gives up waiting for its exit, and the child is killed on drop).
async fn start_dispatcher(redis: &RedisServer, env: &[(&str, &str)]) -> anyhow::Result<String> {
    let mut child = tokio::process::Command::new(binary("usher-dispatcher")?)
        .env_clear()
        .env("USHER_REDIS_URL", redis.url())
        .env("USHER_LISTEN", free_addr()?.to_string())
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stderr = child.stderr.take();
    let exited = within(
        &format!("the dispatcher with {env:?} to exit"),
        Duration::from_secs(10),
        child.wait(),
    )
    .await;
    let mut text = String::new();
    if let Some(mut e) = stderr {
        use tokio::io::AsyncReadExt;
        if exited.is_ok() {
            e.read_to_string(&mut text).await?;
        }
    }
    let status = exited??;
    anyhow::ensure!(!status.success(), "{env:?} started: {text}");
    Ok(text)
}

const LONG: &str = "0123456789abcdef0123456789abcdef";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_shorter_than_32_characters_stops_the_dispatcher_naming_it() -> anyhow::Result<()>
{
    let redis = RedisServer::start()?;
    let short_admin = format!("ok:{LONG},a:x");
    for (env, variable) in [
        (vec![("USHER_ADMIN_TOKEN", "a:x")], "USHER_ADMIN_TOKEN"),
        (vec![("USHER_ADMIN_TOKEN", &LONG[1..])], "USHER_ADMIN_TOKEN"),
        (
            vec![("USHER_ADMIN_TOKEN", short_admin.as_str())],
            "USHER_ADMIN_TOKEN",
        ),
        (
            vec![
                ("USHER_ADMIN_TOKEN", LONG),
                ("USHER_SERVICE_TOKEN", "service-token"),
            ],
            "USHER_SERVICE_TOKEN",
        ),
    ] {
        let text = start_dispatcher(&redis, &env).await?;
        assert!(text.contains(variable), "{env:?}: {text}");
        assert!(text.contains("32"), "{env:?} says the rule: {text}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_unknown_kids_cost_at_most_one_jwks_fetch_per_gap() -> anyhow::Result<()> {
    let stack = stack().await?;
    let (_, token) = admitted(&stack, "quiet").await?;
    let genuine = claims(&token)?;
    let (relay, server) = JwksRelay::start(&stack).await?;
    let a = Admission::builder(stack.dispatcher.url())
        .audiences(["quiet"])
        .jwks_url(format!("{}/jwks", server.url()))
        .build()?;
    a.verify(&token).await?;
    assert_eq!(relay.fetches(), 1);

    // 3 rounds of 20 tokens, each with a new random kid, sent at once: with the default gap
    // (3 s) each round waits for the next fetch, a gap after the last, and shares it.
    let start = Instant::now();
    for _ in 0..3 {
        let round: Vec<_> = (0..20)
            .map(|_| -> anyhow::Result<_> {
                let t = SigningKey::from_pkcs8_pem(&SigningKey::generate_pem()?)?.mint(&genuine);
                let a = a.clone();
                Ok(tokio::spawn(async move { a.verify(&t).await }))
            })
            .collect::<anyhow::Result<_>>()?;
        // Meanwhile a genuine token is never held up by them.
        within(
            "a genuine token to verify",
            Duration::from_secs(1),
            a.verify(&token),
        )
        .await??;
        for t in round {
            assert!(matches!(t.await?, Err(VerifyError::Key(KeyError::Unknown))));
        }
    }
    let fetched = relay.fetches() - 1;
    let gaps = start.elapsed().as_secs() / 3 + 1;
    assert!(
        fetched as u64 <= gaps,
        "{fetched} fetches for 60 random kids in {:?}",
        start.elapsed()
    );
    assert!(fetched >= 1, "the unknown kids were looked up");
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_removed_from_the_jwks_is_refused_after_max_age() -> anyhow::Result<()> {
    let stack = stack().await?;
    let (_, token) = admitted(&stack, "quiet").await?;
    let (relay, server) = JwksRelay::start(&stack).await?;
    const MAX_AGE: Duration = Duration::from_secs(2);
    let a = Admission::builder(stack.dispatcher.url())
        .audiences(["quiet"])
        .jwks_url(format!("{}/jwks", server.url()))
        .jwks_refresh(Duration::from_millis(100), MAX_AGE)
        .build()?;
    let fetched = Instant::now();
    a.verify(&token).await?;
    // The dispatcher's key leaves the key set (a key withdrawn after a leak).
    relay.empty.store(true, Ordering::SeqCst);
    let refused = eventually("the removed key to be refused", async || {
        matches!(
            a.verify(&token).await,
            Err(VerifyError::Key(KeyError::Unknown))
        )
    })
    .await;
    let after = fetched.elapsed();
    refused?;
    // Accepted only while the fetched set was younger than max_age: the refusal came with
    // the first fetch after it (plus one poll of `eventually`).
    assert!(after >= MAX_AGE, "refused at {after:?}, before max_age");
    assert!(
        after < MAX_AGE + Duration::from_secs(2),
        "refused only at {after:?}"
    );
    assert_eq!(relay.fetches(), 2, "one fetch at max_age");
    server.stop().await
}
