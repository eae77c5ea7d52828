//! Proof of work (`challenge: "pow"`): a join takes a place only with a fresh, genuine,
//! sufficient and unspent solution; every refusal is `200` + `event: challenge` with a fresh
//! puzzle and the stream ends; a solution takes one place however many joins carry it; a
//! puzzle from one gateway is good at another; resumes need no solution.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use usher_pow::{leading_zero_bits, solve};
use usher_testkit::line::{data, jwks, verify_token, T};
use usher_testkit::sse::SseConn;
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::wait::eventually;
use usher_testkit::SseClient;

/// Cheap in a debug build (about 1,000 hashes), yet 1,000 times less likely to be met by
/// chance than not.
const DIFFICULTY: u8 = 10;

/// `GET /api/queues/{queue}/challenge` on `base`: (status, body).
async fn fetch(base: &str, queue: &str) -> anyhow::Result<(u16, Value)> {
    let r = reqwest::get(format!("{base}/api/queues/{queue}/challenge")).await?;
    let status = r.status().as_u16();
    Ok((status, r.json().await?))
}

/// A solution to a puzzle fetched from `base`.
async fn solved(base: &str, queue: &str) -> anyhow::Result<String> {
    let (status, p) = fetch(base, queue).await?;
    anyhow::ensure!(status == 200, "challenge answered {status}: {p}");
    Ok(solution_of(&p))
}

/// A solution to the puzzle in `p` (a challenge answer or event payload).
fn solution_of(p: &Value) -> String {
    let puzzle = p["puzzle"].as_str().unwrap_or_default();
    let d = p["difficulty"].as_u64().unwrap_or(0) as u8;
    let (nonce, _) = solve(puzzle, d, 0);
    format!("{puzzle}.{nonce}")
}

/// Opens a join stream on `base`, with `?pow=` when `solution` is given.
async fn join(base: &str, queue: &str, solution: Option<&str>) -> anyhow::Result<SseConn> {
    let path = match solution {
        Some(s) => format!("/api/queues/{queue}/stream?pow={s}"),
        None => format!("/api/queues/{queue}/stream"),
    };
    let conn = SseClient::new(base).open(&path, None).await?;
    anyhow::ensure!(conn.status == 200, "the stream answered {}", conn.status);
    Ok(conn)
}

/// The first event of a stream.
async fn first(conn: &mut SseConn) -> anyhow::Result<usher_sse::Event> {
    conn.next_event(T)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the stream ended without an event"))
}

/// Asserts a join was refused with `reason`: `event: challenge` with a fresh puzzle (no
/// ticket), then the end of the stream. Returns the event's data.
async fn refused(mut conn: SseConn, reason: &str) -> anyhow::Result<Value> {
    assert_eq!(
        conn.headers
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("text/event-stream")
    );
    let e = first(&mut conn).await?;
    assert_eq!(e.event, "challenge", "{}", e.data);
    assert_eq!(e.id, "", "a refused join gets no ticket");
    let d = data(&e);
    assert_eq!(d["reason"], reason, "{d}");
    assert!(d["puzzle"].as_str().is_some_and(|p| p.starts_with("2.")));
    assert!(d["expires_at"].is_string());
    assert_eq!(conn.next_item(T).await?, None, "the stream ends");
    Ok(d)
}

/// A paused proof-of-work queue (nobody is admitted: the waiting count shows every place).
async fn pow_queue(stack: &Stack, queue: &str) -> anyhow::Result<()> {
    stack.create_queue(queue, 50.0).await?;
    stack
        .put_queue(
            queue,
            json!({"paused": true, "challenge": "pow", "pow_difficulty": DIFFICULTY}),
        )
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_needs_a_fresh_genuine_unspent_solution() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions {
        gateways: 2,
        ..Default::default()
    })
    .await?;
    let (a, b) = (stack.gateway_url(0), stack.gateway_url(1));
    pow_queue(&stack, "pow").await?;
    pow_queue(&stack, "other").await?;
    stack.create_queue("plain", 50.0).await?;

    // The puzzle route: a pow queue's puzzle; JSON errors for the others.
    let (status, p) = fetch(&a, "pow").await?;
    assert_eq!(status, 200, "{p}");
    assert_eq!(p["difficulty"], DIFFICULTY);
    assert!(p["puzzle"].as_str().is_some_and(|s| s.contains(".pow.")));
    let (status, e) = fetch(&a, "nosuch").await?;
    assert_eq!((status, e["error"].is_string()), (404, true), "{e}");
    let (status, e) = fetch(&a, "plain").await?;
    assert_eq!((status, e["error"].is_string()), (409, true), "{e}");

    // No solution: refused, with a puzzle to solve.
    let fresh = refused(join(&a, "pow", None).await?, "missing").await?;
    assert_eq!(fresh["difficulty"], DIFFICULTY);
    assert_eq!(fresh["queue"], "pow");

    // Forged: the MAC of a solved puzzle changed; another queue's puzzle; a nonce short of
    // the difficulty; garbage.
    let good = solution_of(&fresh);
    let (head, nonce) = good.rsplit_once('.').unwrap_or_default();
    let (body, mac) = head.rsplit_once('.').unwrap_or_default();
    let flipped = if mac.starts_with('A') { "B" } else { "A" };
    let forged = format!("{body}.{flipped}{}.{nonce}", &mac[1..]);
    refused(join(&a, "pow", Some(&forged)).await?, "invalid").await?;
    let foreign = solved(&a, "other").await?;
    refused(join(&a, "pow", Some(&foreign)).await?, "invalid").await?;
    let short = (0u64..)
        .find(|n| leading_zero_bits(&Sha256::digest(format!("{head}.{n}"))) < u32::from(DIFFICULTY))
        .unwrap_or_default();
    refused(
        join(&a, "pow", Some(&format!("{head}.{short}"))).await?,
        "invalid",
    )
    .await?;
    refused(join(&a, "pow", Some("1.pow.x")).await?, "invalid").await?;
    assert_eq!(stack.waiting("pow").await?, 0, "no place was taken");

    // Solved on gateway A's puzzle, joined through gateway B: a place.
    let mut conn = join(&b, "pow", Some(&good)).await?;
    let e = first(&mut conn).await?;
    assert_eq!(e.event, "waiting", "{}", e.data);
    assert_eq!(data(&e)["position"], 1);
    let ticket = e.id.clone();
    assert_eq!(stack.waiting("pow").await?, 1);

    // The same solution again, on either gateway: spent.
    refused(join(&a, "pow", Some(&good)).await?, "spent").await?;
    refused(join(&b, "pow", Some(&good)).await?, "spent").await?;
    assert_eq!(stack.waiting("pow").await?, 1);

    // A resume needs no solution, by Last-Event-ID or ?ticket=, on either gateway (at once,
    // as a reload does: the place stays present, tests/redis/reconnect.rs).
    drop(conn);
    let mut resumed = SseClient::new(a.clone())
        .open("/api/queues/pow/stream", Some(&ticket))
        .await?;
    let e = resumed.wait_for("waiting", T).await?;
    assert_eq!(
        (e.id.as_str(), &data(&e)["position"]),
        (ticket.as_str(), &json!(1))
    );
    drop(resumed);
    let mut resumed = SseClient::new(b.clone())
        .open(&format!("/api/queues/pow/stream?ticket={ticket}"), None)
        .await?;
    let e = resumed.wait_for("waiting", T).await?;
    assert_eq!(data(&e)["position"], 1);
    assert_eq!(stack.waiting("pow").await?, 1, "no second place");

    // A harder setting refuses the easier puzzles solved before it (the join script checks
    // the queue's current difficulty), and the fresh puzzle asks the new one.
    let easy = solved(&a, "pow").await?;
    stack
        .put_queue("pow", json!({"pow_difficulty": DIFFICULTY + 2}))
        .await?;
    let fresh = refused(join(&a, "pow", Some(&easy)).await?, "invalid").await?;
    assert_eq!(fresh["difficulty"], DIFFICULTY + 2);
    let harder = solution_of(&fresh);
    let mut second = join(&a, "pow", Some(&harder)).await?;
    let e = first(&mut second).await?;
    assert_eq!(
        (e.event.as_str(), &data(&e)["position"]),
        ("waiting", &json!(2))
    );

    // Admitted at its turn, with a token that verifies.
    stack.put_queue("pow", json!({"paused": false})).await?;
    let e = resumed.wait_for("admitted", T).await?;
    verify_token(
        &jwks(&stack).await?,
        data(&e)["token"].as_str().unwrap_or_default(),
        "pow",
    )?;
    // Back to no challenge: a join without a solution takes a place (within the gateways'
    // one-second setting cache).
    stack.put_queue("pow", json!({"challenge": "none"})).await?;
    let plain = eventually("a join without a solution to take a place", async || {
        let mut plain = join(&a, "pow", None).await?;
        let e = first(&mut plain).await?;
        anyhow::ensure!(e.event == "waiting", "{}: {}", e.event, e.data);
        Ok(plain)
    })
    .await?;
    drop(plain);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_puzzle_is_refused_as_expired() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    pow_queue(&stack, "pow").await?;
    // A gateway whose puzzles live three seconds, on the same Redis (long enough that a fresh
    // one is fetched, solved and used in time on a loaded machine).
    let mut cfg = usher_testkit::config::gateway(&stack.redis.url());
    cfg.challenge_ttl_secs = 3;
    let short = usher_testkit::stack::gateway_with(cfg).await?;
    let (status, puzzle) = fetch(&short.url(), "pow").await?;
    anyhow::ensure!(status == 200, "challenge answered {status}: {puzzle}");
    let stale = solution_of(&puzzle);
    // The end-to-end test of a puzzle's expiry runs on the wall clock: its lifetime must pass.
    // (usher_pow's unit tests check the rule with a synthetic clock.)
    let expires_ms = puzzle["expires_at"]
        .as_str()
        .and_then(usher_core::time::parse_rfc3339_ms)
        .ok_or_else(|| anyhow::anyhow!("no expires_at: {puzzle}"))?;
    usher_testkit::wait::clock_past("the puzzle's expires_at", expires_ms).await?;
    refused(join(&short.url(), "pow", Some(&stale)).await?, "expired").await?;
    assert_eq!(stack.waiting("pow").await?, 0);
    // A fresh one from the same gateway, used at once, is good.
    let fresh = solved(&short.url(), "pow").await?;
    let mut conn = join(&short.url(), "pow", Some(&fresh)).await?;
    assert_eq!(first(&mut conn).await?.event, "waiting");
    short.stop().await?;
    Ok(())
}

/// The expiry is signed into the puzzle, so gateways with different puzzle lifetimes (a
/// rolling change of `USHER_CHALLENGE_TTL_SECS`) agree on it: a solution spent on the one
/// with the short lifetime stays spent on the one with the long lifetime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateways_with_different_puzzle_lifetimes_never_reopen_a_spent_solution(
) -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    pow_queue(&stack, "pow").await?;
    let long = stack.gateway_url(0);
    let mut cfg = usher_testkit::config::gateway(&stack.redis.url());
    cfg.challenge_ttl_secs = 1;
    let short = usher_testkit::stack::gateway_with(cfg).await?;
    // A puzzle of the long-lived gateway, spent on the short-lived one.
    let issued_ms = usher_core::time::now_ms();
    let s = solved(&long, "pow").await?;
    let mut conn = join(&short.url(), "pow", Some(&s)).await?;
    assert_eq!(first(&mut conn).await?.event, "waiting");
    // Past the short gateway's own lifetime (wall-clock time, on purpose): still spent, on
    // either gateway.
    usher_testkit::wait::clock_past("the short gateway's 1 s lifetime", issued_ms + 1_000).await?;
    refused(join(&long, "pow", Some(&s)).await?, "spent").await?;
    refused(join(&short.url(), "pow", Some(&s)).await?, "spent").await?;
    assert_eq!(stack.waiting("pow").await?, 1, "one solution, one place");
    short.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_joins_with_one_solution_take_one_place() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions {
        gateways: 2,
        ..Default::default()
    })
    .await?;
    pow_queue(&stack, "pow").await?;
    for round in 0..5u64 {
        let s = solved(&stack.gateway_url(0), "pow").await?;
        // Eight joins at once with the one solution, half on each gateway (so some share a
        // join batch, and the two gateways race in Redis).
        let joins = (0..8).map(|i| {
            let (base, s) = (stack.gateway_url(i % 2), s.clone());
            async move {
                let mut c = join(&base, "pow", Some(&s)).await?;
                let e = first(&mut c).await?;
                Ok::<_, anyhow::Error>((e, c))
            }
        });
        let answers = futures::future::try_join_all(joins).await?;
        let (places, refusals): (Vec<_>, Vec<_>) =
            answers.into_iter().partition(|(e, _)| e.event == "waiting");
        assert_eq!(places.len(), 1, "round {round}: one solution, one place");
        for (e, _) in &refusals {
            assert_eq!(e.event, "challenge");
            assert_eq!(data(e)["reason"], "spent");
        }
        assert_eq!(stack.waiting("pow").await?, round + 1);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_checks_the_challenge_settings() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    let q = stack.create_queue("q", 5.0).await?;
    assert_eq!(q["challenge"], "none", "off by default: {q}");
    let url = format!("{}/admin/queues/q", stack.dispatcher.url());
    for bad in [
        json!({"challenge": "captcha"}),
        json!({"challenge": "POW"}),
        json!({"pow_difficulty": 0}),
        json!({"pow_difficulty": 33}),
        json!({"pow_difficulty": 300}),
        json!({"pow_difficulty": -1}),
        json!({"pow_difficulty": "18"}),
        json!({"challenge": "pow", "pow_difficulty": 40}),
    ] {
        let r = stack.http.put(&url).json(&bad).send().await?;
        let status = r.status().as_u16();
        let body: Value = r.json().await?;
        assert_eq!(status, 400, "{bad} → {body}");
        assert!(body["error"].is_string(), "{body}");
    }
    assert_eq!(
        stack.queue("q").await?["challenge"],
        "none",
        "nothing changed"
    );
    // Turned on without a difficulty: the default.
    let q = stack.put_queue("q", json!({"challenge": "pow"})).await?;
    assert_eq!(
        (&q["challenge"], &q["pow_difficulty"]),
        (
            &json!("pow"),
            &json!(usher_core::challenge::DEFAULT_POW_DIFFICULTY)
        )
    );
    let q = stack.put_queue("q", json!({"pow_difficulty": 32})).await?;
    assert_eq!(q["pow_difficulty"], 32);
    let q = stack.put_queue("q", json!({"challenge": "none"})).await?;
    assert_eq!(
        (&q["challenge"], &q["pow_difficulty"]),
        (&json!("none"), &json!(32))
    );
    Ok(())
}
