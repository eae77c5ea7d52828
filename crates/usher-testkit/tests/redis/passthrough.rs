//! Passthrough: a joiner is admitted in the join itself when nobody waits, never faster than
//! the queue's rate (the token bucket is shared with the tick), and `passthrough: false`
//! queues everyone; nobody passes while a scheduled sale's draw is pending.

use std::time::{Duration, Instant};

use serde_json::json;
use usher_core::ids::QueueId;
use usher_core::time::{now_ms, rfc3339_ms};
use usher_testkit::line::{data, jwks, verify_token, T};
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::wait::{eventually_within, within};
use usher_testkit::{RedisProbe, SseClient};

/// A tick long enough that an admission by the tick would be seen as `waiting` first.
const TICK_MS: u64 = 1000;

/// The first event a fresh join gets (after `retry:`), with its stream.
async fn first_event(
    client: &SseClient,
    queue: &str,
) -> anyhow::Result<(usher_sse::Event, usher_testkit::sse::SseConn)> {
    let mut conn = client
        .open(&format!("/api/queues/{queue}/stream"), None)
        .await?;
    anyhow::ensure!(conn.status == 200, "join answered {}", conn.status);
    let e = conn
        .next_event(T)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the stream ended without an event"))?;
    Ok((e, conn))
}

/// Creates (or changes) `queue` and waits for a tick that ran after it (a new queue's first
/// tick sets its token bucket up; a changed one's applies the change).
async fn queue_after_a_tick(
    stack: &Stack,
    queue: &str,
    body: serde_json::Value,
) -> anyhow::Result<()> {
    let probe = RedisProbe::connect(&stack.redis.url()).await?;
    stack.put_queue(queue, body).await?;
    probe
        .next_tick(&QueueId::new(queue)?, Duration::from_secs(30))
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_is_admitted_at_once_only_when_nobody_waits() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions {
        tick_ms: TICK_MS,
        ..Default::default()
    })
    .await?;
    // One token per 4 s, a burst of one: the first joiner passes, the next ones queue (the
    // bucket has no token again for 4 s, however slow the first admission's delivery).
    queue_after_a_tick(&stack, "pass", json!({"admit_per_second": 0.25})).await?;
    let probe = RedisProbe::connect(&stack.redis.url()).await?;
    let pass = QueueId::new("pass")?;
    eventually_within(
        "the bucket to hold a token",
        Duration::from_secs(30),
        async || {
            let level = probe.bucket_level(&pass).await?;
            anyhow::ensure!(level >= 1.0, "level {level}");
            Ok(())
        },
    )
    .await?;
    let client = SseClient::new(stack.gateway_url(0));
    let asked = Instant::now();
    let (first, mut conn) = first_event(&client, "pass").await?;
    // A figure, not a check: the admission is minted and delivered on the dispatcher's wake,
    // not at the next tick.
    println!(
        "passthrough: admitted {:?} after the request",
        asked.elapsed()
    );
    assert_eq!(
        first.event, "admitted",
        "nobody waits: admitted in the join"
    );
    assert!(first.id.starts_with("pass."), "the ticket is the event id");
    let token = data(&first)["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    verify_token(&jwks(&stack).await?, &token, "pass")?;
    assert_eq!(
        conn.next_item(T).await?,
        None,
        "the stream ends after admitted"
    );

    // The bucket is spent: the next joiner waits, and so does everyone behind it. (That nobody
    // passes a waiting place even once the bucket has a token again is checked at the store,
    // with a synthetic clock: `time_rules::passthrough_joins_spend_the_bucket_at_the_rate`.
    // Here the tick would spend that token on the waiting place first.)
    let (second, _c2) = first_event(&client, "pass").await?;
    assert_eq!(second.event, "waiting");
    let (third, _c3) = first_event(&client, "pass").await?;
    assert_eq!(third.event, "waiting", "somebody waits: no passthrough");
    assert_eq!(data(&third)["position"], 2);

    // The queue's counters include the passthrough admission.
    let q = stack.queue("pass").await?;
    assert_eq!(q["passthrough"], true);
    assert!(q["admitted_total"].as_u64() >= Some(1));

    // A paused queue admits nobody, passthrough included.
    queue_after_a_tick(
        &stack,
        "paused",
        json!({"admit_per_second": 5.0, "paused": true}),
    )
    .await?;
    let (e, _c) = first_event(&client, "paused").await?;
    assert_eq!(e.event, "waiting");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_off_queues_everyone() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions {
        tick_ms: TICK_MS,
        ..Default::default()
    })
    .await?;
    queue_after_a_tick(
        &stack,
        "line",
        json!({"admit_per_second": 50.0, "passthrough": false}),
    )
    .await?;
    let client = SseClient::new(stack.gateway_url(0));
    let (e, mut conn) = first_event(&client, "line").await?;
    assert_eq!(e.event, "waiting", "passthrough off: everyone queues");
    // ... and is admitted by the tick.
    conn.wait_for("admitted", T).await?;
    // Turned on live, without a restart: the next joiner passes.
    queue_after_a_tick(&stack, "line", json!({"passthrough": true})).await?;
    let (e, _c) = first_event(&client, "line").await?;
    assert_eq!(e.event, "admitted");
    Ok(())
}

/// 1,000 joins at once against 10/s: about one tick's worth (the bucket's burst) is admitted
/// at once, plus what the bucket refills while the burst lasts; everyone else waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_at_an_empty_queue_never_beats_the_rate() -> anyhow::Result<()> {
    let _solo = usher_testkit::solo().await; // heavy, and measures a rate
    let stack = Stack::start(StackOptions {
        tick_ms: TICK_MS,
        ..Default::default()
    })
    .await?;
    const RATE: f64 = 10.0;
    const N: usize = 1000;
    let created = Instant::now();
    queue_after_a_tick(&stack, "burst", json!({"admit_per_second": RATE})).await?;
    let client = SseClient::new(stack.gateway_url(0));
    let started = Instant::now();
    let joins: Vec<_> = (0..N)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                first_event(&client, "burst")
                    .await
                    .map(|(e, c)| (e.event, c))
            })
        })
        .collect();
    let mut firsts = Vec::new();
    let mut conns = Vec::new();
    for j in joins {
        let (event, conn) = j.await??;
        firsts.push(event);
        conns.push(conn);
    }
    let secs = started.elapsed().as_secs_f64();
    let at_once = firsts.iter().filter(|e| *e == "admitted").count();
    let waiting = firsts.iter().filter(|e| *e == "waiting").count();
    println!("{N} joins in {secs:.2} s: {at_once} admitted at once, {waiting} waiting");
    assert_eq!(
        at_once + waiting,
        N,
        "every join got admitted or waiting first"
    );
    // The bucket holds one tick's worth (10) and refills at 10/s while the burst lasts.
    let bound = RATE + (RATE * secs).ceil();
    assert!(at_once >= 1, "an empty queue lets the first joiners pass");
    assert!(
        at_once as f64 <= bound,
        "{at_once} admitted at once in {secs:.2} s at {RATE}/s (bound {bound})"
    );
    // And the queue's total never beat the rate since its bucket was set up.
    let q = stack.queue("burst").await?;
    let total = q["admitted_total"].as_u64().unwrap_or(0) as f64;
    let since = created.elapsed().as_secs_f64() + 0.5;
    assert!(
        total <= RATE + RATE * since,
        "{total} admitted within {since:.1} s at {RATE}/s"
    );
    Ok(())
}

/// A join admitted at once whose wake signal never came (here: a join made straight on Redis,
/// which publishes none) is still minted and recorded, by the dispatcher's once-per-tick sweep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_wake_costs_a_tick_not_the_admission() -> anyhow::Result<()> {
    use usher_core::store::{PlaceState, Store};
    let stack = Stack::start(StackOptions {
        tick_ms: 200,
        ..Default::default()
    })
    .await?;
    queue_after_a_tick(&stack, "quiet", json!({"admit_per_second": 5.0})).await?;
    let store = Store::connect(&stack.redis.url()).await?;
    let q = usher_core::ids::QueueId::new("quiet")?;
    let now = usher_core::time::now_ms();
    let PlaceState::AdmittedNow { place } =
        usher_testkit::probe::join(&store, &q, 999, now).await?
    else {
        anyhow::bail!("nobody waits: the join admits at once");
    };
    let admitted = async {
        loop {
            if let PlaceState::Admitted(rec) = store.status(&q, place, now).await? {
                return anyhow::Ok(rec);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let rec = within("the admission record", T, admitted).await??;
    verify_token(&jwks(&stack).await?, &rec.token, "quiet")?;
    Ok(())
}

/// A scheduled sale: while its draw is pending nobody passes, however empty the line: every
/// join goes to the pre-queue (the draw's block in `join.lua` comes first), and is admitted
/// only after the draw, from its drawn place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_admits_nobody_while_a_draw_is_pending() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions {
        tick_ms: TICK_MS,
        ..Default::default()
    })
    .await?;
    queue_after_a_tick(&stack, "sale", json!({"admit_per_second": 50.0})).await?;
    let client = SseClient::new(stack.gateway_url(0));
    let (first, _admitted) = first_event(&client, "sale").await?;
    assert_eq!(first.event, "admitted", "passthrough is on: {first:?}");

    let opens_at = rfc3339_ms(now_ms() + 6000);
    stack
        .put_queue("sale", json!({"opens_at": opens_at}))
        .await?;
    let mut pre = Vec::new();
    for _ in 0..3 {
        let (e, conn) = first_event(&client, "sale").await?;
        assert_eq!(
            e.event, "scheduled",
            "the pre-queue, not passthrough: {e:?}"
        );
        pre.push((e.id, conn));
    }
    let q = stack.queue("sale").await?;
    assert_eq!(q["active"], 1, "nobody admitted ahead of the draw: {q}");
    assert_eq!(q["admitted_total"], 1, "{q}");

    // The draw ends each pre-queue stream; the same ticket resumes in line and is admitted.
    for (ticket, mut conn) in pre {
        let end = conn.next_event(Duration::from_secs(20)).await?;
        assert!(end.is_none(), "the draw ends the pre-queue stream: {end:?}");
        let mut again = client
            .open("/api/queues/sale/stream", Some(ticket.as_str()))
            .await?;
        let admitted = again.wait_for("admitted", T).await?;
        assert_eq!(admitted.id, ticket);
    }
    assert_eq!(stack.queue("sale").await?["admitted_total"], 4);
    Ok(())
}
