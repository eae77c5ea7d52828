//! The rules about time, tested at the store with a synthetic clock: the Lua scripts take the
//! time as an argument (`now_ms`), so a test can stand a second, a TTL or a grace period
//! later without waiting for it, and check the edge to the millisecond. Each rule keeps one
//! end-to-end test on the wall clock: `adaptive::a_fixed_rate_holds_within_two_percent_over_a_long_drain`
//! (the rate), `sessions::` (the session TTL and its sliding cap),
//! `positions::*::a_dropped_browser_keeps_its_place_for_the_grace_period_only` (the away grace)
//! and `pow::a_stale_puzzle_is_refused_as_expired` (a puzzle's expiry, whose own rule is checked
//! with a synthetic clock by `usher_pow`'s unit tests).

use usher_core::ids::{PlaceId, QueueId};
use usher_core::store::{PlaceState, QueueConfig, SessionState, Store, Tick};
use usher_testkit::line::take_lease;
use usher_testkit::{tick_args, tick_at, tick_calls, RedisServer};

/// A synthetic "now": any fixed time works, since nothing here reads the wall clock.
const T0: u64 = 1_700_000_000_000;

/// A Redis and a queue `q` with `config`, and `n` places joined at `T0` through gateway 0.
async fn queue_with(
    config: QueueConfig,
    n: usize,
) -> anyhow::Result<(RedisServer, Store, QueueId, Vec<PlaceId>)> {
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("clock")?;
    store.put_queue(&q, &config).await?;
    let mut places = Vec::new();
    if n > 0 {
        let joined = store.join_many(&q, 0, T0, n).await?;
        for i in 0..n {
            match joined.state(i) {
                PlaceState::Waiting { place, .. } => places.push(place),
                other => anyhow::bail!("join {i}: {other:?}"),
            }
        }
    }
    Ok((redis, store, q, places))
}

/// The bucket refills at `admit_per_second` on the clock the ticks are given, carries the
/// fraction of a place to the next tick, never spends the same time twice, and refills at most
/// one second's budget after a stall (`max_elapsed_ms` of the tick arguments).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bucket_refills_at_the_rate_on_the_ticks_clock() -> anyhow::Result<()> {
    let config = QueueConfig {
        admit_per_second: 10.0,
        passthrough: false,
        ..Default::default()
    };
    let (_redis, store, q, _) = queue_with(config, 100).await?;
    let lease = take_lease(&store, &q).await?;
    // The queue's first tick has the budget of `first_elapsed_ms` (100 ms): one place.
    assert_eq!(tick_at(&store, &q, &lease, T0).await?.admitted, 1);
    // The same instant again: no time passed, nothing to spend.
    assert_eq!(tick_at(&store, &q, &lease, T0).await?.admitted, 0);
    // 250 ms later: 2.5 places of budget, 2 admitted, half a place carried.
    let t = tick_at(&store, &q, &lease, T0 + 250).await?;
    assert_eq!(t.admitted, 2);
    assert!((t.carry - 0.5).abs() < 1e-9, "carry {}", t.carry);
    // Another 50 ms: the carried half and this half make one.
    assert_eq!(tick_at(&store, &q, &lease, T0 + 300).await?.admitted, 1);
    // A whole second: ten.
    assert_eq!(tick_at(&store, &q, &lease, T0 + 1_300).await?.admitted, 10);
    // A stall of a minute refills one second's budget, not sixty.
    let t = tick_at(&store, &q, &lease, T0 + 61_300).await?;
    assert_eq!(t.admitted, 10, "a stall is not made up for");
    assert_eq!(t.waiting, 100 - 1 - 2 - 1 - 10 - 10);
    Ok(())
}

/// An admitted place's session lasts `session_ttl_seconds` from its admission, to the
/// millisecond; a sliding session is extended by a touch to now + TTL, never past its cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ends_at_its_ttl_and_a_touch_slides_it_up_to_the_cap() -> anyhow::Result<()> {
    const TTL_MS: u64 = 60_000;
    const CAP_MS: u64 = 100_000;
    let config = QueueConfig {
        admit_per_second: 1_000.0,
        passthrough: false,
        session_ttl_seconds: TTL_MS / 1000,
        ..Default::default()
    };
    let (_redis, store, q, places) = queue_with(config, 2).await?;
    let lease = take_lease(&store, &q).await?;
    assert_eq!(tick_at(&store, &q, &lease, T0).await?.admitted, 2);
    let fixed = places[0];
    let active = SessionState::Active {
        expires_at_ms: T0 + TTL_MS,
    };
    assert_eq!(store.session(&q, fixed, T0 + TTL_MS - 1).await?, active);
    assert_eq!(
        store.session(&q, fixed, T0 + TTL_MS).await?,
        SessionState::Ended
    );
    // A touch does not slide a fixed session.
    assert_eq!(
        store
            .touch_session(&q, fixed, T0 + 30_000, T0 + CAP_MS)
            .await?,
        active
    );

    // Sliding: the queue is switched to sliding sessions (the touch script reads the queue's
    // settings at each touch).
    let sliding = QueueConfig {
        admit_per_second: 1_000.0,
        passthrough: false,
        session_ttl_seconds: TTL_MS / 1000,
        sliding_session: true,
        max_session_seconds: CAP_MS / 1000,
        ..Default::default()
    };
    store.put_queue(&q, &sliding).await?;
    let slide = places[1];
    let touched = store
        .touch_session(&q, slide, T0 + 30_000, T0 + CAP_MS)
        .await?;
    assert_eq!(
        touched,
        SessionState::Active {
            expires_at_ms: T0 + 30_000 + TTL_MS
        },
        "a touch extends to now + TTL"
    );
    let touched = store
        .touch_session(&q, slide, T0 + 80_000, T0 + CAP_MS)
        .await?;
    assert_eq!(
        touched,
        SessionState::Active {
            expires_at_ms: T0 + CAP_MS
        },
        "never past the cap"
    );
    assert_eq!(
        store.session(&q, slide, T0 + CAP_MS).await?,
        SessionState::Ended
    );
    assert_eq!(
        store
            .touch_session(&q, slide, T0 + CAP_MS, T0 + CAP_MS)
            .await?,
        SessionState::Ended,
        "an ended session is not brought back by a touch"
    );
    Ok(())
}

/// A place whose browser went away keeps its place, passed over by admissions, for exactly
/// `grace_seconds` from when it went away (to the millisecond before); then a tick drops it,
/// never admitting it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_away_place_is_kept_for_the_grace_period_and_then_dropped() -> anyhow::Result<()> {
    const GRACE_MS: u64 = 30_000;
    let config = QueueConfig {
        admit_per_second: 10.0,
        passthrough: false,
        grace_seconds: GRACE_MS / 1000,
        ..Default::default()
    };
    let (_redis, store, q, places) = queue_with(config, 3).await?;
    let lease = take_lease(&store, &q).await?;
    let away_at = T0 + 1_000;
    assert_eq!(store.mark_away(&q, &places[..1], 0, away_at).await?, 1);
    // The first tick's one place of budget goes to the place behind the away one.
    let t = tick_at(&store, &q, &lease, away_at).await?;
    assert_eq!((t.admitted, t.dropped), (1, 0));
    assert!(
        matches!(
            store.status(&q, places[0], away_at).await?,
            PlaceState::Waiting { .. }
        ),
        "the away place keeps its place"
    );
    // The last millisecond of the grace period: still kept (the tick spends its budget on the
    // place behind it).
    let t = tick_at(&store, &q, &lease, away_at + GRACE_MS - 1).await?;
    assert_eq!((t.admitted, t.dropped), (1, 0));
    assert!(matches!(
        store.status(&q, places[0], away_at + GRACE_MS - 1).await?,
        PlaceState::Waiting { .. }
    ));
    // At its end: dropped, not admitted.
    let t = tick_at(&store, &q, &lease, away_at + GRACE_MS).await?;
    assert_eq!((t.admitted, t.dropped, t.waiting), (0, 1, 0));
    let state = store.status(&q, places[0], away_at + GRACE_MS).await?;
    assert!(
        !matches!(
            state,
            PlaceState::Waiting { .. } | PlaceState::Admitted { .. }
        ),
        "{state:?}"
    );
    Ok(())
}

/// A join at an empty queue with passthrough on spends the bucket the ticks refill: at most
/// one tick's worth (here one place) at once, then only as the clock refills it; and nobody
/// passes while somebody waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_joins_spend_the_bucket_at_the_rate() -> anyhow::Result<()> {
    let config = QueueConfig {
        admit_per_second: 10.0,
        passthrough: true,
        ..Default::default()
    };
    let (_redis, store, q, _) = queue_with(config, 0).await?;
    let lease = take_lease(&store, &q).await?;
    // Before the queue's first tick there is no bucket: the join waits.
    let j = store.join_many(&q, 0, T0, 1).await?;
    assert_eq!(admitted_now(&j), 0, "{j:?}");
    // The first tick admits it and starts the bucket's clock.
    assert_eq!(tick_at(&store, &q, &lease, T0).await?.admitted, 1);
    // A second later, a burst of five: one tick's worth (one place at 10/s and 100 ms ticks)
    // passes, the others wait.
    let j = store.join_many(&q, 0, T0 + 1_000, 5).await?;
    assert_eq!(admitted_now(&j), 1, "{j:?}");
    // Later still, the bucket has refilled, but people wait: nobody passes them.
    let j = store.join_many(&q, 0, T0 + 5_000, 1).await?;
    assert_eq!(admitted_now(&j), 0, "{j:?}");
    Ok(())
}

/// A tick made ahead of its admission time (`clock_ms` before `now_ms`, as the dispatcher
/// ticks) stamps its admissions with the admission time, yet ends nothing before its time on
/// the clock: an away place whose grace ends between the two is kept (passed over), and a
/// session ending between them still counts as active; the next tick on the clock ends both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_ahead_is_stamped_with_its_admission_time_but_ends_nothing_early(
) -> anyhow::Result<()> {
    const GRACE_MS: u64 = 30_000;
    const TTL_MS: u64 = 30_000;
    let config = QueueConfig {
        admit_per_second: 10.0,
        passthrough: false,
        grace_seconds: GRACE_MS / 1000,
        session_ttl_seconds: TTL_MS / 1000,
        ..Default::default()
    };
    let (_redis, store, q, places) = queue_with(config, 3).await?;
    let lease = take_lease(&store, &q).await?;
    assert_eq!(store.mark_away(&q, &places[..1], 0, T0).await?, 1);
    // Admits places[1] at T0: its session ends at T0 + TTL_MS, as places[0]'s grace does.
    assert_eq!(tick_at(&store, &q, &lease, T0).await?.admitted, 1);
    let at = T0 + GRACE_MS;
    let ahead = usher_core::store::TickArgs {
        clock_ms: Some(at - 1),
        ..tick_args(&lease, at)
    };
    let calls = tick_calls(&store, &q, &ahead).await?;
    let [Tick::Ticked(out)] = &calls[..] else {
        anyhow::bail!("one call: {calls:?}")
    };
    assert_eq!((out.admitted, out.dropped), (1, 0), "{out:?}");
    assert!(out.fresh.iter().all(|e| e.admitted_at_ms == at), "{out:?}");
    assert_eq!(out.active, 2, "the session ending at {at} still counts");
    assert!(matches!(
        store.status(&q, places[0], at - 1).await?,
        PlaceState::Waiting { .. }
    ));
    // On the clock: the grace is over and the session too.
    let on_time = tick_at(&store, &q, &lease, at + 100).await?;
    assert_eq!(on_time.dropped, 1, "{on_time:?}");
    let stats = store.queue_stats(&q, at + 100).await?;
    assert_eq!((stats.waiting, stats.active), (0, 1), "{stats:?}");
    Ok(())
}

/// Passthrough does not overtake a tick made ahead: its bucket has refilled up to the tick's
/// admission time, and a join before that time that passes is admitted at that time, the
/// same as the admissions the tick holds until then (never stamped, nor sent, before them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passthrough_join_in_a_ticks_lead_is_admitted_at_its_admission_time() -> anyhow::Result<()>
{
    // Recording: the fairness record must note the admission at that time too.
    let config = QueueConfig {
        admit_per_second: 10.0,
        passthrough: true,
        record: true,
        ..Default::default()
    };
    let (_redis, store, q, _) = queue_with(config, 1).await?;
    let lease = take_lease(&store, &q).await?;
    assert_eq!(tick_at(&store, &q, &lease, T0).await?.admitted, 1);
    // A tick ahead, stamped T0 + 1,000 at T0 + 900: nobody waits, the bucket keeps a tick's
    // worth (one place) for passthrough.
    let at = T0 + 1_000;
    let ahead = usher_core::store::TickArgs {
        clock_ms: Some(at - 100),
        ..tick_args(&lease, at)
    };
    tick_calls(&store, &q, &ahead).await?;
    let j = store.join_many(&q, 0, at - 50, 1).await?;
    assert_eq!(admitted_now(&j), 1, "{j:?}");
    let (entries, passed) = store
        .outbox(&q, usher_core::store::OutboxList::Passed, 10)
        .await?;
    assert_eq!(entries, 1);
    assert!(
        passed.iter().all(|e| e.admitted_at_ms == at),
        "admitted at the tick's admission time: {passed:?}"
    );
    // The record: the place that joined at T0 and was admitted at T0 (no wait), and this one,
    // joined 50 ms before its admission time: its wait is those 50 ms, not none.
    let report = store
        .fairness_report(&q)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no fairness report"))?;
    let waits = report.waits.unwrap_or_default();
    let max = waits
        .iter()
        .filter_map(|w| w.max_seconds)
        .fold(0.0, f64::max);
    assert!(
        (max - 0.05).abs() < 1e-9,
        "the longest recorded wait is the 50 ms to the admission time: {waits:?}"
    );
    Ok(())
}

/// How many of a join call's places were admitted by the join itself (passthrough).
fn admitted_now(j: &usher_core::store::Joined) -> u64 {
    match j {
        usher_core::store::Joined::Places { admitted_now, .. } => *admitted_now,
        _ => u64::MAX,
    }
}
