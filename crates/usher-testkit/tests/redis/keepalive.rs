//! Keepalive comments on real streams: a silent stream gets them, never later than the
//! period after its last write, and a stream whose line moves does not need them (its events
//! keep the connection busy).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use usher_sse::Item;
use usher_testkit::line::*;
use usher_testkit::sse::SseConn;
use usher_testkit::stack::{self, Stack, StackOptions};
use usher_testkit::SseClient;

/// The keepalive period of the gateways under test: short, so a test sees several periods.
const KEEPALIVE_SECS: u64 = 1;

/// A stack with no gateway of its own, and one gateway with keepalive period `secs`.
async fn stack_with_keepalive(secs: u64) -> anyhow::Result<(Stack, stack::Server)> {
    let stack = Stack::start(StackOptions {
        gateways: 0,
        ..Default::default()
    })
    .await?;
    let mut cfg = usher_testkit::config::gateway(&stack.redis.url());
    cfg.keepalive_secs = secs;
    let gw = stack::gateway_with(cfg).await?;
    Ok((stack, gw))
}

/// Reads `conn` for `window`, or until `enough` events arrived; returns (keepalive comments,
/// events) with their arrival times.
async fn read_for(
    conn: &mut SseConn,
    window: Duration,
    enough: usize,
) -> (Vec<Instant>, Vec<Instant>) {
    let (mut comments, mut events) = (Vec::new(), Vec::new());
    let end = Instant::now() + window;
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        match conn.next_item(left).await {
            Ok(Some(Item::Comment(c))) if c == "keepalive" => comments.push(Instant::now()),
            Ok(Some(Item::Event(_))) => {
                events.push(Instant::now());
                if events.len() >= enough {
                    break;
                }
            }
            Ok(Some(_)) => {}
            // The window ended (nothing more arrived in it) or the stream ended.
            Ok(None) | Err(_) => break,
        }
    }
    (comments, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_streams_get_keepalives_and_moving_ones_need_none() -> anyhow::Result<()> {
    let _solo = usher_testkit::solo().await; // measures periods
    let (stack, gw) = stack_with_keepalive(KEEPALIVE_SECS).await?;
    let client = SseClient::new(gw.url());

    // A paused line: nothing moves, so only keepalives keep the connection busy.
    stack
        .put_queue("still", json!({"admit_per_second": 1, "paused": true}))
        .await?;
    let (_, _, mut idle) = join(&client, "still").await?;
    let (comments, events) = read_for(&mut idle, Duration::from_millis(3_500), usize::MAX).await;
    assert!(events.is_empty(), "nothing moved: {} events", events.len());
    // One comment per period (1 s); a stream is never silent longer than a period.
    assert!(
        (2..=4).contains(&comments.len()),
        "{} keepalive comments in 3.5 s with a 1 s period",
        comments.len()
    );

    // A moving line: one admission per 100 ms tick, so the last of 40 browsers gets a new
    // position every tick for about four seconds.
    stack
        .put_queue("moving", json!({"admit_per_second": 10, "paused": true}))
        .await?;
    let mut conns = Vec::new();
    for _ in 0..40 {
        conns.push(join(&client, "moving").await?);
    }
    let (_, last_pos, mut last) = conns.pop().ok_or_else(|| anyhow::anyhow!("joined"))?;
    assert_eq!(last_pos, 40);
    stack
        .put_queue("moving", json!({"admit_per_second": 10, "paused": false}))
        .await?;
    let start = Instant::now();
    // Ten position updates, however long a loaded machine takes to tick ten times.
    let (comments, events) = read_for(
        &mut last,
        usher_testkit::wait::patient(Duration::from_secs(30)),
        10,
    )
    .await;
    assert!(
        events.len() >= 10,
        "the line moved: only {} events in 30 s",
        events.len()
    );
    // Events keep the stream busy: a comment may come only after a period of silence (a
    // tick held up by a loaded machine makes one), never between events a tick apart. Half
    // a period of slack covers this reader's own timestamps.
    let period = Duration::from_secs(KEEPALIVE_SECS);
    for at in &comments {
        let before = events
            .iter()
            .chain(&comments)
            .filter(|t| *t < at)
            .max()
            .unwrap_or(&start);
        assert!(
            at.duration_since(*before) >= period / 2,
            "a keepalive comment {:?} after the stream's last write ({} events, {} comments)",
            at.duration_since(*before),
            events.len(),
            comments.len()
        );
    }

    drop(conns);
    gw.stop().await?;
    Ok(())
}

/// How late past the period a comment may arrive and still keep the promise: the timer, the
/// gateway's stream task and this reader all run on a machine shared with other work. A
/// protocol bound, not a performance target; the old rule let a stream go half a period
/// (500 ms here) past it. A stall of this test's runtime (where the gateway runs too) is
/// measured and allowed on top: it holds up the gateway's timer and the reader alike.
const SCHEDULING_ALLOWANCE: Duration = Duration::from_millis(300);

/// Measures, until `done` is set, the longest a 10 ms sleep on this runtime overran: how long
/// the runtime (and so the in-process gateway) was held up at worst.
fn runtime_stall_probe(done: Arc<AtomicBool>) -> tokio::task::JoinHandle<Duration> {
    tokio::spawn(async move {
        let mut worst = Duration::ZERO;
        while !done.load(Ordering::Relaxed) {
            let t = Instant::now();
            tokio::time::sleep(Duration::from_millis(10)).await;
            worst = worst.max(t.elapsed().saturating_sub(Duration::from_millis(10)));
        }
        worst
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_silent_stream_goes_longer_than_the_period_without_a_comment() -> anyhow::Result<()> {
    let _solo = usher_testkit::solo().await; // measures periods
    let (stack, gw) = stack_with_keepalive(KEEPALIVE_SECS).await?;
    let period = Duration::from_secs(KEEPALIVE_SECS);
    let client = SseClient::new(gw.url());
    stack
        .put_queue("still", json!({"admit_per_second": 1, "paused": true}))
        .await?;

    // Streams joined at scattered moments, so their last writes fall anywhere between their
    // groups' ticks (the worst case of the old rule is a write just before a tick).
    let readers_done = Arc::new(AtomicBool::new(false));
    let stall = runtime_stall_probe(readers_done.clone());
    let mut readers = Vec::new();
    for i in 0..24u64 {
        let (_, _, mut conn) = join(&client, "still").await?;
        let joined = Instant::now();
        readers.push(tokio::spawn(async move {
            let window = Duration::from_millis(4_500);
            let (comments, events) = read_for(&mut conn, window, usize::MAX).await;
            (joined, comments, events)
        }));
        tokio::time::sleep(Duration::from_millis(37 * (i % 5))).await;
    }
    let mut worst = Duration::ZERO;
    for reader in readers {
        let (joined, comments, events) = reader.await?;
        assert!(events.is_empty(), "nothing moved: {} events", events.len());
        // Silence is measured from the join's `waiting` event to each comment in turn.
        let mut last = joined;
        for at in &comments {
            worst = worst.max(at.duration_since(last));
            last = *at;
        }
        // And the stream did not simply stop commenting early in the window.
        assert!(comments.len() >= 3, "{} comments in 4.5 s", comments.len());
    }
    readers_done.store(true, Ordering::Relaxed);
    let stall = stall.await?;
    assert!(
        worst <= period + SCHEDULING_ALLOWANCE + stall,
        "a stream was silent for {worst:?} with a {period:?} keepalive period (this runtime \
         stalled {stall:?} at worst)"
    );
    gw.stop().await?;
    Ok(())
}
