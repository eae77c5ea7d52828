//! Positions: exact, pushed, only decreasing; FIFO admission; leaving and disconnecting.

use std::time::Duration;

use serde_json::json;
use usher_testkit::line::*;
use usher_testkit::stack::{Backend, Stack, StackOptions};
use usher_testkit::wait::{eventually, eventually_within};
use usher_testkit::SseClient;

// Every scenario here runs on one redis-server (this binary, `redis`) and on a Redis Cluster
// (`topologies`, which compiles this file too): each binary's main.rs defines the macro.
on_every_backend!(
    positions_are_exact_pushed_and_only_decrease,
    admission_is_fifo,
    a_dropped_browser_keeps_its_place_for_the_grace_period_only,
);

async fn positions_are_exact_pushed_and_only_decrease<R: Backend>() -> anyhow::Result<()> {
    let stack = Stack::<R>::launch(StackOptions::default()).await?;
    stack.create_queue("pos", PAUSED).await?;
    let client = SseClient::new(stack.gateway_url(0));
    let mut watchers = Vec::new();
    let mut tickets = Vec::new();
    for i in 1..=300u64 {
        let (ticket, pos, w) = join_watch(&client, "pos").await?;
        assert_eq!(pos, i, "joiner {i} is told its place at once");
        tickets.push(ticket);
        watchers.push(w);
    }
    assert_eq!(stack.queue("pos").await?["waiting"], 300);

    // Ten leave through the API, spread over the line.
    let leaving: Vec<usize> = vec![0, 1, 9, 50, 99, 100, 150, 200, 250, 299];
    for &i in &leaving {
        let r = stack
            .http
            .delete(format!(
                "{}/api/queues/pos/tickets/{}",
                stack.gateway_url(0),
                tickets[i]
            ))
            .send()
            .await?;
        assert_eq!(r.status(), 204);
    }
    // Leaving twice is harmless.
    let again = stack
        .http
        .delete(format!(
            "{}/api/queues/pos/tickets/{}",
            stack.gateway_url(0),
            tickets[0]
        ))
        .send()
        .await?;
    assert_eq!(again.status(), 204);

    let expected =
        |i: usize| -> u64 { (i + 1 - leaving.iter().filter(|&&l| l < i).count()) as u64 };
    eventually_within(
        "everyone behind shows the exact new position",
        Duration::from_secs(5),
        async || {
            (0..300)
                .filter(|i| !leaving.contains(i))
                .all(|i| position(&watchers[i]) == Some(expected(i)))
        },
    )
    .await?;
    for &i in &leaving {
        let closed = watchers[i].last("closed").expect("a leaver is told");
        assert_eq!(data(&closed)["reason"], "left");
        eventually("the leaver's stream to end", async || {
            watchers[i].has_ended()
        })
        .await?;
    }
    assert_eq!(stack.queue("pos").await?["waiting"], 290);

    // Admit 40 at once: the rest move up by 40, exactly.
    stack
        .put_queue("pos", json!({"admit_per_second": 400}))
        .await?;
    eventually("40 admitted", async || stack_admitted(&watchers) >= 40).await?;
    stack
        .put_queue("pos", json!({"admit_per_second": PAUSED}))
        .await?;
    let admitted_now = stack_admitted(&watchers);
    let still: Vec<usize> = (0..300)
        .filter(|i| !leaving.contains(i) && watchers[*i].last("admitted").is_none())
        .collect();
    eventually_within(
        "positions follow admissions exactly",
        Duration::from_secs(5),
        async || {
            still
                .iter()
                .all(|&i| position(&watchers[i]) == Some(expected(i) - admitted_now as u64))
        },
    )
    .await?;
    for (i, w) in watchers.iter().enumerate() {
        let seen = positions(w);
        assert!(
            seen.windows(2).all(|p| p[1] <= p[0]),
            "joiner {i}'s positions went up: {seen:?}"
        );
    }
    Ok(())
}

fn stack_admitted(ws: &[usher_testkit::sse::Watcher]) -> usize {
    ws.iter().filter(|w| w.last("admitted").is_some()).count()
}

async fn admission_is_fifo<R: Backend>() -> anyhow::Result<()> {
    let stack = Stack::<R>::launch(StackOptions::default()).await?;
    stack.create_queue("fifo", PAUSED).await?;
    let client = SseClient::new(stack.gateway_url(0));
    let mut watchers = Vec::new();
    for _ in 0..200 {
        watchers.push(join_watch(&client, "fifo").await?.2);
    }
    stack
        .put_queue("fifo", json!({"admit_per_second": 300}))
        .await?;
    eventually_within("200 admitted", Duration::from_secs(20), async || {
        stack_admitted(&watchers) == 200
    })
    .await?;
    let mut order: Vec<(u64, u64)> = watchers
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let a = data(&w.last("admitted").expect("admitted"));
            let at = a["admitted_at"].as_str().unwrap_or_default();
            let ms = usher_core::time::parse_rfc3339_ms(at).expect("admitted_at is RFC 3339");
            (ms, i as u64)
        })
        .collect();
    // Sorting by admission time keeps join order: later joiners were never admitted earlier.
    order.sort();
    let joined: Vec<u64> = order.iter().map(|(_, i)| *i).collect();
    let mut sorted = joined.clone();
    sorted.sort();
    assert_eq!(joined, sorted, "admitted in join order");
    // And the tokens' places (sub) are in join order too.
    let subs: Vec<u64> = watchers
        .iter()
        .map(|w| {
            let t = data(&w.last("admitted").expect("admitted"))["token"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            place_from_token(&t)
        })
        .collect();
    assert!(subs.windows(2).all(|p| p[0] < p[1]), "{subs:?}");
    Ok(())
}

fn place_from_token(t: &str) -> u64 {
    use base64::Engine;
    let payload = t.split('.').nth(1).expect("JWT payload");
    let v: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .expect("base64url"),
    )
    .expect("JSON claims");
    v["sub"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("numeric sub")
}

async fn a_dropped_browser_keeps_its_place_for_the_grace_period_only<R: Backend>(
) -> anyhow::Result<()> {
    let stack = Stack::<R>::launch(StackOptions {
        gateways: 2,
        ..Default::default()
    })
    .await?;
    stack
        .put_queue(
            "drop",
            json!({"admit_per_second": PAUSED, "grace_seconds": 1, "confirm": true}),
        )
        .await?;
    let a = SseClient::new(stack.gateway_url(0));
    let b = SseClient::new(stack.gateway_url(1));
    let (t1, _, w1) = join_watch(&a, "drop").await?;
    let (_t2, _, w2) = join_watch(&a, "drop").await?;
    let (_t3, p3, w3) = join_watch(&a, "drop").await?;
    assert_eq!(p3, 3);

    // Away for less than the grace period, back through the other gateway: same place.
    // The end-to-end test of the grace period runs on the wall clock; `time_rules::` checks
    // its edges at the store with a synthetic clock.
    w1.disconnect();
    // The gateway that held it wrote the disconnect (two flush rounds) before the check.
    usher_testkit::line::away_flushed(&stack.gateway_url(0), 2).await?;
    assert_eq!(
        position(&w3),
        Some(3),
        "nobody moves up during the grace period"
    );
    let resumed_ms = usher_core::time::now_ms();
    let mut back = b.open("/api/queues/drop/stream", Some(&t1)).await?;
    let e = back.wait_for("waiting", T).await?;
    assert_eq!(data(&e)["position"], 1, "the place is kept");
    // The grace period ended with the resume: staying connected past it (wall-clock time,
    // on purpose) changes nothing.
    usher_testkit::wait::clock_past("the 1 s grace period after the resume", resumed_ms + 1_000)
        .await?;
    assert_eq!(stack.queue("drop").await?["waiting"], 3);

    // Away for longer than the grace period: the place goes, the line moves up, no admission.
    drop(back);
    eventually(
        "the line moves up once the grace period is over",
        async || position(&w3) == Some(2) && position(&w2) == Some(1),
    )
    .await?;
    let q = stack.queue("drop").await?;
    assert_eq!(q["waiting"], 2);
    assert_eq!(q["admitted_total"], 0, "a dropped place costs no admission");
    assert_eq!(
        b.open("/api/queues/drop/stream", Some(&t1)).await?.status,
        410
    );
    Ok(())
}
