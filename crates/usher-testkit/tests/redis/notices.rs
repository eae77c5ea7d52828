//! Talking to the line: operators' notices, closing a queue as sold out, and away places that
//! wait at their position (not admitted while their browser is away, admitted on its return).

use serde_json::{json, Value};
use usher_core::ids::{PlaceId, QueueId};
use usher_core::store::{PlaceState, Tick, TickArgs, MAX_ADMIT_PER_TICK};
use usher_core::time::now_ms;
use usher_testkit::line::*;
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::wait::eventually;
use usher_testkit::{RedisProbe, SseClient};

async fn two_gateways() -> anyhow::Result<(Stack, SseClient, SseClient)> {
    let stack = Stack::start(StackOptions {
        gateways: 2,
        ..Default::default()
    })
    .await?;
    let a = SseClient::new(stack.gateway_url(0));
    let b = SseClient::new(stack.gateway_url(1));
    Ok((stack, a, b))
}

/// `POST /admin/queues/{queue}/notice` with `body`: (status, JSON answer).
async fn post_notice(stack: &Stack, queue: &str, body: &str) -> anyhow::Result<(u16, Value)> {
    let r = stack
        .http
        .post(format!(
            "{}/admin/queues/{queue}/notice",
            stack.dispatcher.url()
        ))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await?;
    Ok((r.status().as_u16(), r.json().await?))
}

/// `DELETE /admin/queues/{queue}{query}`: (status, JSON answer).
async fn close(stack: &Stack, queue: &str, query: &str) -> anyhow::Result<(u16, Value)> {
    let r = stack
        .http
        .delete(format!(
            "{}/admin/queues/{queue}{query}",
            stack.dispatcher.url()
        ))
        .send()
        .await?;
    Ok((r.status().as_u16(), r.json().await?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_reaches_every_waiter_on_every_gateway_and_no_other_queue() -> anyhow::Result<()> {
    let (stack, a, b) = two_gateways().await?;
    stack.create_queue("sale", PAUSED).await?;
    stack.create_queue("other", PAUSED).await?;
    let mut sale = waiters(&a, "sale", 3).await?;
    sale.extend(waiters(&b, "sale", 3).await?);
    let other = waiters(&a, "other", 2).await?;

    let (status, sent) = post_notice(
        &stack,
        "sale",
        &json!({"message": "Section A is sold out"}).to_string(),
    )
    .await?;
    assert_eq!(status, 202, "{sent}");
    assert_eq!(sent, json!({"queue": "sale", "gateways": 2}));
    eventually("every waiter of the queue hears the notice", async || {
        sale.iter().all(|(_, w)| w.last("notice").is_some())
    })
    .await?;
    for (ticket, w) in &sale {
        let e = w.last("notice").expect("seen");
        assert_eq!(
            data(&e),
            json!({"queue": "sale", "message": "Section A is sold out"})
        );
        // The notice has no `id:` line: the last event id is still the ticket.
        assert_eq!(&e.id, ticket);
        assert_eq!(w.all("notice").len(), 1, "one notice, shown once");
        assert!(!w.has_ended(), "a notice does not end the stream");
    }

    // A second notice follows the first; a later position update repeats neither.
    let (status, _) =
        post_notice(&stack, "sale", r#"{"message": "Section B opens at 10"}"#).await?;
    assert_eq!(status, 202);
    eventually("every waiter to hear the second notice", async || {
        sale.iter().all(|(_, w)| w.all("notice").len() == 2)
    })
    .await?;
    let r = stack
        .http
        .delete(format!(
            "{}/api/queues/sale/tickets/{}",
            stack.gateway_url(0),
            sale[0].0
        ))
        .send()
        .await?;
    assert_eq!(r.status(), 204);
    eventually("the line moved up", async || {
        sale[1..]
            .iter()
            .all(|(_, w)| position(w).is_some_and(|p| p < 6))
    })
    .await?;
    for (_, w) in &sale[1..] {
        assert_eq!(
            w.all("notice").len(),
            2,
            "position updates repeat no notice"
        );
    }

    // Browsers of another queue hear nothing, once every gateway has applied the notices.
    let probe = RedisProbe::connect(&stack.redis.url()).await?;
    probe
        .gateways_applied(&usher_core::store::Store::connect(&stack.redis.url()).await?)
        .await?;
    tokio::time::sleep(usher_testkit::wait::DELIVERY).await;
    for (_, w) in &other {
        assert!(w.last("notice").is_none(), "{:?}", w.snapshot());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_notices_are_refused_with_json_errors() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    stack.create_queue("sale", PAUSED).await?;
    let long = "x".repeat(501);
    for body in [
        json!({"message": ""}).to_string(),
        json!({"message": "   "}).to_string(),
        json!({"message": long}).to_string(),
        json!({"message": "two\nlines"}).to_string(),
        json!({"message": "bell\u{7}"}).to_string(),
        json!({"message": 5}).to_string(),
        json!({"message": "hi", "extra": 1}).to_string(),
        json!({}).to_string(),
        "not json".to_owned(),
    ] {
        let (status, v) = post_notice(&stack, "sale", &body).await?;
        assert_eq!(status, 400, "{body}: {v}");
        assert!(v["error"].is_string(), "{body}: {v}");
    }
    let (status, v) = post_notice(&stack, "never", r#"{"message": "hi"}"#).await?;
    assert_eq!(status, 404, "{v}");
    assert!(v["error"].is_string());
    let (status, v) = post_notice(&stack, "bad.id", r#"{"message": "hi"}"#).await?;
    assert_eq!(status, 400, "{v}");
    // 500 characters (not bytes) is the limit.
    let (status, v) = post_notice(
        &stack,
        "sale",
        &json!({"message": "é".repeat(500)}).to_string(),
    )
    .await?;
    assert_eq!(status, 202, "{v}");
    assert_eq!(v["gateways"], 0, "nobody waits yet");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_as_sold_out_tells_every_waiter_and_later_resumes() -> anyhow::Result<()> {
    let (stack, a, b) = two_gateways().await?;
    stack.create_queue("sale", PAUSED).await?;
    let mut sale = waiters(&a, "sale", 2).await?;
    sale.extend(waiters(&b, "sale", 2).await?);

    // Reasons other than the two an operator closes for are refused; the queue stays open.
    for query in [
        "?reason=left",
        "?reason=closed",
        "?reason=",
        "?why=sold_out",
    ] {
        let (status, v) = close(&stack, "sale", query).await?;
        assert_eq!(status, 400, "{query}: {v}");
        assert!(v["error"].is_string());
    }
    assert_eq!(stack.queue("sale").await?["open"], true);
    let (status, v) = close(&stack, "never", "?reason=sold_out").await?;
    assert_eq!(status, 404, "{v}");

    let (status, v) = close(&stack, "sale", "?reason=sold_out").await?;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["open"], false);
    eventually("every waiter's stream to end", async || {
        sale.iter().all(|(_, w)| w.has_ended())
    })
    .await?;
    for (_, w) in &sale {
        let e = w.last("closed").expect("closed event");
        assert_eq!(data(&e), json!({"queue": "sale", "reason": "sold_out"}));
    }

    // Later: a resume and a status poll are still 404, and say why.
    let (ticket, _) = &sale[0];
    let again = b.open("/api/queues/sale/stream", Some(ticket)).await?;
    assert_eq!(again.status, 404);
    let body = again.error_body.unwrap_or_default();
    assert!(body.contains("sold_out"), "{body}");
    let r = stack
        .http
        .get(format!(
            "{}/api/queues/sale/status?ticket={ticket}",
            stack.gateway_url(0)
        ))
        .send()
        .await?;
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await?;
    assert!(
        v["error"].as_str().is_some_and(|e| e.contains("sold_out")),
        "{v}"
    );

    // Reopening forgets the reason; closing with `open: false` says `queue_closed`.
    stack.put_queue("sale", json!({"open": true})).await?;
    let (_, _, w) = join_watch(&a, "sale").await?;
    stack.put_queue("sale", json!({"open": false})).await?;
    eventually("the stream to end", async || w.has_ended()).await?;
    let e = w.last("closed").expect("closed event");
    assert_eq!(data(&e), json!({"queue": "sale", "reason": "queue_closed"}));
    let again = a.open("/api/queues/sale/stream", Some(ticket)).await?;
    assert_eq!(again.status, 404);
    assert!(!again.error_body.unwrap_or_default().contains("sold_out"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_away_place_is_skipped_while_away_and_admitted_when_it_returns() -> anyhow::Result<()> {
    let (stack, a, b) = two_gateways().await?;
    stack
        .put_queue(
            "phones",
            json!({"admit_per_second": 1000.0, "paused": true, "grace_seconds": 60}),
        )
        .await?;
    let (t1, _, w1) = join_watch(&a, "phones").await?;
    let behind = waiters(&a, "phones", 3).await?;

    // The first browser's tab is suspended: its place is away, at the head of the line.
    w1.disconnect();
    eventually("the disconnect is recorded", async || {
        stack.queue("phones").await.ok()?["away"]
            .as_u64()
            .filter(|&n| n == 1)
    })
    .await?;

    stack.put_queue("phones", json!({"paused": false})).await?;
    eventually(
        "the present places behind the away one are admitted",
        async || behind.iter().all(|(_, w)| w.last("admitted").is_some()),
    )
    .await?;
    let q = stack.queue("phones").await?;
    assert_eq!(
        (
            q["waiting"].as_u64(),
            q["away"].as_u64(),
            q["admitted_total"].as_u64()
        ),
        (Some(1), Some(1), Some(3)),
        "the away place keeps its place and costs no admission: {q}"
    );
    // Two more ticks pass over it: still not admitted.
    let probe = RedisProbe::connect(&stack.redis.url()).await?;
    let phones = QueueId::new("phones")?;
    for _ in 0..2 {
        probe.next_tick(&phones, T).await?;
    }
    assert_eq!(
        stack.queue("phones").await?["admitted_total"],
        3,
        "still not admitted"
    );

    // Its browser comes back (through the other gateway): it is at the head, and admitted.
    let mut back = b.open("/api/queues/phones/stream", Some(&t1)).await?;
    assert_eq!(back.status, 200);
    let e = back.wait_for("waiting", T).await?;
    assert_eq!(data(&e)["position"], 1, "it kept its place");
    let e = back.wait_for("admitted", T).await?;
    assert!(data(&e)["token"].is_string());
    let q = stack.queue("phones").await?;
    assert_eq!(
        (q["waiting"].as_u64(), q["admitted_total"].as_u64()),
        (Some(0), Some(4))
    );
    Ok(())
}

/// A long run of away places at the head costs the tick nothing: they wait in `parked`, so the
/// tick admits its budget from the present places behind them in one call, without reading
/// them, and they keep their places (and count in `waiting`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_run_of_away_places_costs_the_tick_nothing() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = usher_core::store::Store::connect(&redis.url()).await?;
    let (q, lease) = away_queue(&store, "away").await?;
    const AWAY: u64 = 1200;
    const PRESENT: u64 = 300;
    let places = take_places(&store, &q, AWAY + PRESENT).await?;
    let marked = store
        .mark_away(&q, &places[..AWAY as usize], 7, now_ms())
        .await?;
    assert_eq!(marked, AWAY);

    // The first tick is budgeted for 100 ms: 100 places, in one call.
    let now = now_ms();
    let args = usher_testkit::tick_args(&lease, now);
    let calls = tick_outcomes(&store, &q, &args).await?;
    assert_eq!(calls, vec![(100, false)]);
    let stats = store.queue_stats(&q, now_ms()).await?;
    assert_eq!(
        (
            stats.waiting,
            stats.away,
            stats.admitted_total,
            stats.dropped_total
        ),
        (AWAY + PRESENT - 100, AWAY, 100, 0),
        "{stats:?}"
    );
    // The admitted ones are the first present places; every away place is still waiting.
    for (i, p) in places.iter().enumerate() {
        let s = store.status(&q, *p, now_ms()).await?;
        let admitted = matches!(s, PlaceState::AdmissionPending | PlaceState::Admitted(_));
        let expected = (AWAY as usize..AWAY as usize + 100).contains(&i);
        assert_eq!(admitted, expected, "place {i}: {s:?}");
    }
    Ok(())
}

/// More away places than a tick may admit ([`MAX_ADMIT_PER_TICK`]) hold nothing back: the
/// tick admits its budget behind them in one call. (Before issue 23 a tick passed over at
/// most that many away places and admitted nobody behind them.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_admits_behind_any_number_of_away_places() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = usher_core::store::Store::connect(&redis.url()).await?;
    let (q, lease) = away_queue(&store, "many").await?;
    let away = MAX_ADMIT_PER_TICK + 200;
    let places = take_places(&store, &q, away + 100).await?;
    store
        .mark_away(&q, &places[..away as usize], 7, now_ms())
        .await?;
    let args = usher_testkit::tick_args(&lease, now_ms());
    let calls = tick_outcomes(&store, &q, &args).await?;
    // The first tick's budget is 100 ms at 1,000 a second: the 100 present places.
    assert_eq!(calls, vec![(100, false)]);
    let stats = store.queue_stats(&q, now_ms()).await?;
    assert_eq!((stats.waiting, stats.away), (away, away));
    Ok(())
}

/// A queue admitting 1,000 a second with a long grace period, and its lease.
async fn away_queue(
    store: &usher_core::store::Store,
    name: &str,
) -> anyhow::Result<(usher_core::ids::QueueId, usher_core::store::Lease)> {
    let q = usher_core::ids::QueueId::new(name)?;
    store
        .put_queue(
            &q,
            &usher_core::store::QueueConfig {
                admit_per_second: 1000.0,
                grace_seconds: 600,
                ..Default::default()
            },
        )
        .await?;
    let lease = take_lease(store, &q).await?;
    Ok((q, lease))
}

/// `n` places for browsers of gateway 7, in line order.
async fn take_places(
    store: &usher_core::store::Store,
    q: &usher_core::ids::QueueId,
    n: u64,
) -> anyhow::Result<Vec<PlaceId>> {
    let mut places = Vec::new();
    let batch = usher_core::store::JOIN_BATCH_MAX as u64;
    while (places.len() as u64) < n {
        let k = (n - places.len() as u64).min(batch) as usize;
        let joined = store.join_many(q, 7, now_ms(), k).await?;
        for i in 0..k {
            match joined.state(i) {
                PlaceState::Waiting { place, .. } => places.push(place),
                other => anyhow::bail!("join: {other:?}"),
            }
        }
    }
    Ok(places)
}

/// One tick's calls as (admitted, more).
async fn tick_outcomes(
    store: &usher_core::store::Store,
    q: &usher_core::ids::QueueId,
    args: &TickArgs<'_>,
) -> anyhow::Result<Vec<(u64, bool)>> {
    let mut out = Vec::new();
    for t in usher_testkit::tick_calls(store, q, args).await? {
        let Tick::Ticked(o) = t else {
            anyhow::bail!("open queue ticks: {t:?}")
        };
        assert_eq!(o.dropped, 0, "nobody is dropped: {o:?}");
        out.push((o.admitted, o.more));
    }
    Ok(out)
}
