//! Scheduled sales: the pre-queue before `opens_at`, the draw that puts it in line, and the
//! public record anyone can check. The checks recompute the draw independently of
//! `usher_core::draw` (SHA-256 and HMAC straight from their crates, and the Python of docs/policies.md).

use crate::draw_check;

use std::collections::HashMap;
use std::time::Duration;

use draw_check::{drawn_order, entrant, python_check};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use usher_core::ids::QueueId;
use usher_core::time::{now_ms, rfc3339_ms};
use usher_testkit::browser::Browser;
use usher_testkit::line::*;
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::wait::{eventually, eventually_within, Seen};
use usher_testkit::{RedisProbe, SseClient};

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

/// Schedules `queue`'s sale `in_ms` from now; returns `opens_at` as the admin API shows it.
async fn schedule(stack: &Stack, queue: &str, in_ms: u64) -> anyhow::Result<String> {
    let (status, v) = put(
        stack,
        queue,
        json!({"opens_at": rfc3339_ms(now_ms() + in_ms)}),
    )
    .await?;
    anyhow::ensure!(status == 200, "schedule answered {status}: {v}");
    v["opens_at"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("no opens_at in {v}"))
}

/// `GET /api/queues/{queue}/draw` on gateway `gw`: (status, JSON answer).
async fn record(stack: &Stack, gw: usize, queue: &str) -> anyhow::Result<(u16, Value)> {
    let r = stack
        .http
        .get(format!("{}/api/queues/{queue}/draw", stack.gateway_url(gw)))
        .send()
        .await?;
    Ok((r.status().as_u16(), r.json().await?))
}

/// The draw record once the draw ran (polled on gateway `gw`).
async fn drawn(stack: &Stack, gw: usize, queue: &str) -> anyhow::Result<Value> {
    // `Some(Err)` stops the wait: the record must answer 200 throughout.
    eventually_within(
        "the draw to run",
        Duration::from_secs(20),
        async || match record(stack, gw, queue).await {
            Err(e) => Some(Err(e)),
            Ok((status, v)) if status != 200 => {
                Some(Err(anyhow::anyhow!("draw record answered {status}: {v}")))
            }
            Ok((_, v)) => (!v["seed"].is_null()).then_some(Ok(v)),
        },
    )
    .await?
}

/// The place id an admitted browser's token names, verified as a booking service would.
fn admitted_place(jwks: &jsonwebtoken::jwk::JwkSet, admitted: &Value, queue: &str) -> u64 {
    let token = admitted["token"].as_str().expect("token");
    let claims = verify_token(jwks, token, queue).expect("a genuine entry token");
    claims["sub"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("sub is a place id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_sale_draws_the_pre_queue_in_the_committed_order() -> anyhow::Result<()> {
    const Q: &str = "concert";
    const EARLY: usize = 10;
    const LATE: usize = 3;
    let stack = Stack::start(StackOptions {
        gateways: 2,
        ..Default::default()
    })
    .await?;
    // Paused until every browser stands in line, so positions are exact and nobody is
    // admitted while the others reconnect after the draw.
    let (status, _) = put(&stack, Q, json!({"admit_per_second": 20.0, "paused": true})).await?;
    assert_eq!(status, 201);
    let opens_at = schedule(&stack, Q, 8000).await?;

    // The commitment is public at once; the seed and the entrants are not.
    let (status, before) = record(&stack, 1, Q).await?;
    assert_eq!(status, 200, "{before}");
    assert_eq!(before["queue"], Q);
    assert_eq!(before["opens_at"], opens_at.as_str());
    assert!(
        before["seed"].is_null() && before["entrants"].is_null(),
        "{before}"
    );
    let commitment = before["commitment"]
        .as_str()
        .expect("commitment")
        .to_owned();
    assert!(
        commitment.len() == 64
            && commitment
                .chars()
                .all(|c| matches!(c, '0'..='9' | 'a'..='f')),
        "lowercase hex SHA-256: {commitment}"
    );

    let clients = vec![
        SseClient::new(stack.gateway_url(0)),
        SseClient::new(stack.gateway_url(1)),
    ];
    let browse = |first: usize| Browser::spawn(clients.clone(), Q, first, Duration::from_secs(90));
    let early: Vec<Browser> = (0..EARLY).map(browse).collect();
    eventually(
        "every early browser hears it is in the pre-queue",
        async || early.iter().all(|b| !b.seen().scheduled.is_empty()),
    )
    .await?;
    for b in &early {
        let s = b.seen();
        assert_eq!(
            s.scheduled[0],
            json!({"queue": Q, "opens_at": opens_at, "joined_pre_queue": true})
        );
        assert!(s.ticket.is_some(), "the scheduled event's id is the ticket");
        assert!(s.positions.is_empty() && s.admitted.is_empty(), "{s:?}");
    }
    let v = stack.queue(Q).await?;
    assert_eq!(v["waiting"], 0, "the pre-queue is not in line yet: {v}");

    // The draw: published, and every early browser resumes into the line.
    let after = drawn(&stack, 0, Q).await?;
    let late: Vec<Browser> = (0..LATE).map(browse).collect();
    eventually("every browser gets waiting after the draw", async || {
        early
            .iter()
            .chain(&late)
            .all(|b| !b.seen().positions.is_empty())
    })
    .await?;

    // The record checks out, recomputed here without usher's code.
    assert_eq!(after["commitment"], commitment.as_str());
    assert_eq!(after["opens_at"], opens_at.as_str());
    let seed = hex::decode(after["seed"].as_str().expect("seed"))?;
    assert_eq!(seed.len(), 32);
    assert_eq!(
        hex::encode(Sha256::digest(&seed)),
        commitment,
        "the seed is the committed one"
    );
    let entrants: Vec<String> = serde_json::from_value(after["entrants"].clone())?;
    let tickets: Vec<String> = early
        .iter()
        .map(|b| b.seen().ticket.expect("ticket"))
        .collect();
    let expected = drawn_order(&seed, tickets.iter().map(|t| entrant(t)).collect());
    assert_eq!(entrants, expected, "the entrants in the seed's order");
    let out = python_check(&after)?;
    assert_eq!(out.trim(), format!("draw verified: {EARLY} entrants"));
    // Both gateways serve the same record.
    let (_, other) = record(&stack, 1, Q).await?;
    assert_eq!(other, after);

    // The line is the drawn order, then the late arrivals; everyone keeps their ticket.
    let rank: HashMap<String, u64> = entrants
        .iter()
        .enumerate()
        .map(|(i, h)| (h.clone(), i as u64 + 1))
        .collect();
    let position = |b: &Browser| b.seen().positions.last().map(|p| p.1);
    eventually(
        "each early browser to stand at its drawn rank",
        async || {
            let at_rank = early.iter().all(|b| {
                let t = b.seen().ticket.expect("ticket");
                position(b) == Some(rank[&entrant(&t)])
            });
            if at_rank {
                Ok(())
            } else {
                Err(Seen(
                    early
                        .iter()
                        .map(|b| (b.seen().ticket, position(b)))
                        .collect::<Vec<_>>(),
                ))
            }
        },
    )
    .await?;
    let mut late_positions: Vec<u64> = late.iter().filter_map(position).collect();
    late_positions.sort_unstable();
    assert_eq!(
        late_positions,
        vec![11, 12, 13],
        "late arrivals queue behind the draw"
    );
    for (b, t) in early.iter().zip(&tickets) {
        assert_eq!(
            b.seen().ticket.as_ref(),
            Some(t),
            "the pre-queue ticket stays"
        );
    }

    // Open the gates: all are admitted, in line order.
    let (status, _) = put(&stack, Q, json!({"paused": false})).await?;
    assert_eq!(status, 200);
    eventually_within(
        "everyone is admitted",
        Duration::from_secs(30),
        async || {
            early
                .iter()
                .chain(&late)
                .all(|b| !b.seen().admitted.is_empty())
        },
    )
    .await?;
    let keys = jwks(&stack).await?;
    let mut line: Vec<(u64, String, bool)> = Vec::new();
    for (b, is_late) in early
        .iter()
        .map(|b| (b, false))
        .chain(late.iter().map(|b| (b, true)))
    {
        let s = b.seen();
        let admitted = &s.admitted[0];
        line.push((
            admitted_place(&keys, admitted, Q),
            admitted["admitted_at"]
                .as_str()
                .expect("admitted_at")
                .to_owned(),
            is_late,
        ));
        let position = |t: &String| rank.get(&entrant(t)).copied();
        if !is_late {
            assert!(position(&s.ticket.expect("ticket")).is_some());
        }
    }
    line.sort();
    let early_places: Vec<u64> = entrants
        .iter()
        .map(|h| {
            let i = tickets
                .iter()
                .position(|t| &entrant(t) == h)
                .expect("an early ticket");
            admitted_place(&keys, &early[i].seen().admitted[0], Q)
        })
        .collect();
    assert!(
        early_places.windows(2).all(|w| w[0] < w[1]),
        "places follow the drawn order: {early_places:?}"
    );
    assert!(
        line.iter().skip(EARLY).all(|l| l.2) && line.iter().take(EARLY).all(|l| !l.2),
        "every late arrival is behind every entrant: {line:?}"
    );
    assert!(
        line.windows(2).all(|w| w[0].1 <= w[1].1),
        "admitted in line order: {line:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_queue_places_resume_and_leave() -> anyhow::Result<()> {
    const Q: &str = "presale";
    let stack = Stack::start(StackOptions::default()).await?;
    stack.create_queue(Q, 50.0).await?;
    let opens_at = schedule(&stack, Q, 8000).await?;
    let c = SseClient::new(stack.gateway_url(0));
    let path = format!("/api/queues/{Q}/stream");

    let mut a = c.open(&path, None).await?;
    let first = a.wait_for("scheduled", T).await?;
    let ticket = first.id.clone();
    assert_eq!(
        data(&first),
        json!({"queue": Q, "opens_at": opens_at, "joined_pre_queue": true})
    );
    let mut b = c.open(&path, None).await?;
    let leaver = b.wait_for("scheduled", T).await?.id;
    assert_ne!(ticket, leaver);

    // Polling says scheduled too.
    let status: Value = stack
        .http
        .get(format!("{}/api/queues/{Q}/status", stack.gateway_url(0)))
        .query(&[("ticket", &ticket)])
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(status["state"], "scheduled");
    assert_eq!(status["opens_at"], opens_at.as_str());

    // Resume: the same place, scheduled again.
    drop(a);
    let mut a = c.open(&path, Some(&ticket)).await?;
    let again = a.wait_for("scheduled", T).await?;
    assert_eq!(again.id, ticket);
    assert_eq!(data(&again)["joined_pre_queue"], true);

    // Leave: the stream hears it, and the place is gone.
    let r = stack
        .http
        .delete(format!(
            "{}/api/queues/{Q}/tickets/{leaver}",
            stack.gateway_url(0)
        ))
        .send()
        .await?;
    assert_eq!(r.status().as_u16(), 204);
    let closed = b.wait_for("closed", T).await?;
    assert_eq!(data(&closed)["reason"], "left");
    let r = stack
        .http
        .get(format!("{}/api/queues/{Q}/status", stack.gateway_url(0)))
        .query(&[("ticket", &leaver)])
        .send()
        .await?;
    assert_eq!(r.status().as_u16(), 410);

    // The draw ends the pre-queue stream without an event; the same ticket resumes in line.
    let record = drawn(&stack, 0, Q).await?;
    assert_eq!(
        record["entrants"],
        json!([entrant(&ticket)]),
        "the leaver is not an entrant"
    );
    let end = a.next_event(T).await?;
    assert!(
        end.is_none(),
        "the pre-queue stream ends without an event: {end:?}"
    );
    let mut a = c.open(&path, Some(&ticket)).await?;
    let e = a.next_event(T).await?.expect("an event");
    assert!(
        e.event == "waiting" || e.event == "admitted",
        "in line after the draw: {e:?}"
    );
    assert_eq!(e.id, ticket, "the pre-queue ticket names the drawn place");
    if e.event == "waiting" {
        let admitted = a.wait_for("admitted", T).await?;
        assert_eq!(admitted.id, ticket);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_schedules_are_refused_and_unknown_draws_are_404() -> anyhow::Result<()> {
    const Q: &str = "sale";
    let stack = Stack::start(StackOptions::default()).await?;
    stack.create_queue(Q, 10.0).await?;
    for bad in [
        json!("tomorrow"),
        json!("2030-01-31 18:00:00"),
        json!(1_900_000_000),
        json!(rfc3339_ms(now_ms() - 60_000)),
    ] {
        let (status, v) = put(&stack, Q, json!({"opens_at": bad})).await?;
        assert_eq!(status, 400, "{bad} → {v}");
        assert!(v["error"].is_string(), "a JSON error: {v}");
    }
    let (status, v) = record(&stack, 0, Q).await?;
    assert_eq!(status, 404, "no scheduled sale: {v}");
    assert!(v["error"].is_string());
    let (status, _) = record(&stack, 0, "nope").await?;
    assert_eq!(status, 404);
    let (status, _) = record(&stack, 0, "bad!queue").await?;
    assert_eq!(status, 400);

    // Scheduled: the same time again changes nothing, a pending draw cannot be removed, and
    // moving it keeps the commitment.
    let opens_at = schedule(&stack, Q, 600_000).await?;
    let (_, first) = record(&stack, 0, Q).await?;
    let (status, v) = put(&stack, Q, json!({"opens_at": opens_at})).await?;
    assert_eq!(status, 200, "{v}");
    let (status, v) = put(&stack, Q, json!({"opens_at": null})).await?;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].is_string());
    let moved = schedule(&stack, Q, 900_000).await?;
    assert_ne!(moved, opens_at);
    let (_, second) = record(&stack, 0, Q).await?;
    assert_eq!(second["commitment"], first["commitment"]);
    assert_eq!(second["opens_at"], moved.as_str());
    let v = stack.queue(Q).await?;
    assert_eq!(v["opens_at"], moved.as_str());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_draw_is_performed_by_the_next_lease_holder() -> anyhow::Result<()> {
    const Q: &str = "handover";
    let Stack {
        redis,
        dispatcher: first,
        gateways,
        http,
        ..
    } = Stack::start(StackOptions::default()).await?;
    let second = usher_testkit::stack::dispatcher(&redis.url(), 100).await?;
    let r = http
        .put(format!("{}/admin/queues/{Q}", second.url()))
        .json(&json!({"admit_per_second": 50.0, "opens_at": rfc3339_ms(now_ms() + 8000)}))
        .send()
        .await?;
    assert_eq!(r.status().as_u16(), 201);
    let browsers = in_pre_queue(
        vec![SseClient::new(gateways[0].url())],
        Q,
        5,
        Duration::from_secs(60),
    )
    .await?;
    // Whichever replica drove the queue, only `second` is left to draw.
    first.stop().await?;
    eventually_within(
        "the remaining replica draws and admits",
        Duration::from_secs(20),
        async || browsers.iter().all(|b| !b.seen().admitted.is_empty()),
    )
    .await?;
    let v: Value = http
        .get(format!("{}/api/queues/{Q}/draw", gateways[0].url()))
        .send()
        .await?
        .json()
        .await?;
    let seed = hex::decode(v["seed"].as_str().expect("seed"))?;
    assert_eq!(
        hex::encode(Sha256::digest(&seed)),
        v["commitment"].as_str().expect("commitment")
    );
    let tickets: Vec<String> = browsers
        .iter()
        .map(|b| entrant(&b.seen().ticket.expect("ticket")))
        .collect();
    let entrants: Vec<String> = serde_json::from_value(v["entrants"].clone())?;
    assert_eq!(
        entrants,
        drawn_order(&seed, tickets),
        "drawn once, in the seed's order"
    );
    let admitted: Value = http
        .get(format!("{}/admin/queues/{Q}", second.url()))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(
        admitted["admitted_total"], 5,
        "each place admitted once: {admitted}"
    );
    second.stop().await?;
    Ok(())
}

/// `POST /admin/queues/{queue}/draw/beacon` with `body`: (status, JSON answer).
async fn post_beacon(stack: &Stack, queue: &str, body: Value) -> anyhow::Result<(u16, Value)> {
    let r = stack
        .http
        .post(format!(
            "{}/admin/queues/{queue}/draw/beacon",
            stack.dispatcher.url()
        ))
        .json(&body)
        .send()
        .await?;
    Ok((r.status().as_u16(), r.json().await?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_beacon_is_waited_for_and_mixed_into_the_order() -> anyhow::Result<()> {
    const Q: &str = "beaconed";
    let stack = Stack::start(StackOptions::default()).await?;
    stack.create_queue(Q, 50.0).await?;
    // Randomness before any round is named, or for a queue with no sale: refused.
    let beacon = hex::encode(rand::random::<[u8; 32]>());
    let (status, _) = post_beacon(&stack, Q, json!({"randomness": beacon})).await?;
    assert_eq!(status, 404, "no sale yet");
    let (status, v) = put(&stack, Q, json!({"draw_beacon": {"drand_round": 7}})).await?;
    assert_eq!(status, 400, "a beacon needs a pending sale: {v}");
    let (status, v) = put(
        &stack,
        Q,
        json!({"opens_at": rfc3339_ms(now_ms() + 1500), "draw_beacon": {"drand_round": 42}}),
    )
    .await?;
    assert_eq!(status, 200, "{v}");
    for bad in [
        json!({"randomness": "zz"}),
        json!({"randomness": "abcd"}),
        json!({"value": beacon}),
    ] {
        let (status, v) = post_beacon(&stack, Q, bad.clone()).await?;
        assert_eq!(status, 400, "{bad} → {v}");
        assert!(v["error"].is_string());
    }

    let browsers = in_pre_queue(
        vec![SseClient::new(stack.gateway_url(0))],
        Q,
        6,
        Duration::from_secs(60),
    )
    .await?;
    // Past opens_at without the round's randomness: two ticks later, the draw still waits.
    let opens = now_ms() + 1500;
    eventually_within("opens_at to pass", Duration::from_secs(3), async || {
        now_ms() > opens
    })
    .await?;
    RedisProbe::connect(&stack.redis.url())
        .await?
        .ticks(&QueueId::new(Q)?, 2)
        .await?;
    let (_, waiting) = record(&stack, 0, Q).await?;
    assert!(
        waiting["seed"].is_null(),
        "no draw without the beacon: {waiting}"
    );
    assert_eq!(
        waiting["beacon"],
        json!({"drand_round": 42, "randomness": null})
    );
    assert!(browsers.iter().all(|b| b.seen().positions.is_empty()));

    let (status, v) = post_beacon(&stack, Q, json!({"randomness": beacon.to_uppercase()})).await?;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v,
        json!({"queue": Q, "drand_round": 42, "randomness": beacon})
    );
    let record = drawn(&stack, 0, Q).await?;
    assert_eq!(
        record["beacon"],
        json!({"drand_round": 42, "randomness": beacon})
    );
    let mut mac_key = hex::decode(record["seed"].as_str().expect("seed"))?;
    mac_key.extend(hex::decode(&beacon)?);
    let hashes: Vec<String> = browsers
        .iter()
        .map(|b| entrant(&b.seen().ticket.expect("ticket")))
        .collect();
    let entrants: Vec<String> = serde_json::from_value(record["entrants"].clone())?;
    assert_eq!(
        entrants,
        drawn_order(&mac_key, hashes),
        "seed and beacon fix the order"
    );
    assert_eq!(python_check(&record)?.trim(), "draw verified: 6 entrants");

    // The beacon cannot change once drawn.
    let other = hex::encode(rand::random::<[u8; 32]>());
    let (status, _) = post_beacon(&stack, Q, json!({"randomness": other})).await?;
    assert_eq!(status, 409);
    let (status, _) = put(&stack, Q, json!({"draw_beacon": {"drand_round": 43}})).await?;
    assert_eq!(status, 400);
    // The same round again (a settings push that repeats it) changes nothing.
    let (status, v) = put(&stack, Q, json!({"draw_beacon": {"drand_round": 42}})).await?;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        drawn(&stack, 0, Q).await?["beacon"],
        json!({"drand_round": 42, "randomness": beacon})
    );
    eventually_within(
        "everyone is admitted after the draw",
        Duration::from_secs(20),
        async || browsers.iter().all(|b| !b.seen().admitted.is_empty()),
    )
    .await?;
    // Listed again as a sale after its draw (the dispatcher's bookkeeping after a draw
    // failed, or the draw's reply was lost): a tick finds it drawn and forgets it.
    let store = usher_core::store::Store::connect(&stack.redis.url()).await?;
    let q = usher_core::ids::QueueId::new(Q)?;
    store.mark_sale(&q, true).await?;
    eventually_within(
        "a drawn sale to be no longer read before every tick",
        Duration::from_secs(30),
        async || {
            let listed = store.sale_queues().await?.contains(&q);
            anyhow::ensure!(!listed, "still listed");
            Ok(())
        },
    )
    .await?;
    Ok(())
}
