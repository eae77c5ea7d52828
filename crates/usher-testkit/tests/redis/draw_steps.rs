//! A scheduled sale's draw runs in steps of `DRAW_STEP` places, one script call each, so a
//! big pre-queue never holds Redis for the whole draw (BENCHMARKS.md, "Scheduled sale: the
//! draw"). A draw interrupted between steps (a crash, a lost lease, a step sent twice) stays
//! pending; the next lease holder goes on after the last entrant recorded, and the line and
//! the published record come out as one uninterrupted draw of the same entrants makes them. A close mid-draw treats every
//! entrant alike, and a draw that took long does not let its first places expire unheard.
//!
//! Driven through `usher_core::store` against a real `redis-server`, as the dispatcher drives
//! it: each interruption is placed exactly between two calls.

use std::time::Duration;

use anyhow::Context;
use usher_core::draw::{EntrantHash, Seed};
use usher_core::ids::{PlaceId, QueueId};
use usher_core::keys::QueueKeys;
use usher_core::messages::CloseReason;
use usher_core::store::{
    BeaconChange, BeaconOutcome, DrawOutcome, DrawPhase, DrawPrep, DrawStep, DueDraw, Joined,
    Lease, PlaceState, PreQueueFate, PreRestore, QueueConfig, SeenDraw, Store, Tick, DRAW_STEP,
};
use usher_core::time::now_ms;
use usher_testkit::{RedisProbe, RedisServer};

/// `n` joins into `q`'s pre-queue (for six gateways in turn), each with the entrant hash of a
/// stand-in ticket, as a gateway records them before handing out the tickets.
async fn join_pre(
    store: &Store,
    q: &QueueId,
    n: u64,
    tag: &str,
) -> anyhow::Result<Vec<(EntrantHash, PlaceId)>> {
    let mut out = Vec::new();
    let mut left = n;
    let mut gw = 0u16;
    while left > 0 {
        let batch = left.min(500);
        let Joined::Scheduled { last, count, .. } =
            store.join_many(q, gw % 6, now_ms(), batch as usize).await?
        else {
            anyhow::bail!("joins did not go to the pre-queue");
        };
        let entrants: Vec<_> = (last + 1 - count..=last)
            .map(|p| {
                (
                    PlaceId(p),
                    EntrantHash::of_ticket(&format!("{q}.{p}.{tag}")),
                )
            })
            .collect();
        store.record_entrants(q, &entrants).await?;
        out.extend(entrants.into_iter().map(|(p, h)| (h, p)));
        left -= batch;
        gw += 1;
    }
    Ok(out)
}

/// The position of pre-queue place `place` (mapped to its place in line by the draw).
async fn position(store: &Store, q: &QueueId, place: PlaceId) -> anyhow::Result<u64> {
    match store.status(q, place, now_ms()).await? {
        PlaceState::Waiting { position, .. } => Ok(position),
        other => anyhow::bail!("place {place:?} is {other:?}"),
    }
}

/// A lease's time to live in these tests: long enough for a debug build's step.
const TTL_MS: u64 = 60_000;

/// A queue `name` with a scheduled sale of `n` entrants, due now, and replica A's lease.
async fn sale(
    store: &Store,
    name: &str,
    n: usize,
    cfg: QueueConfig,
) -> anyhow::Result<(QueueId, Seed, Vec<(EntrantHash, PlaceId)>, Lease)> {
    let q = QueueId::new(name)?;
    store.put_queue(&q, &cfg).await?;
    let seed = Seed::generate();
    store
        .schedule(&q, Some(now_ms() + 3_600_000), &seed)
        .await?;
    let entrants = join_pre(store, &q, n as u64, "early").await?;
    // Due now (a pending sale keeps its seed when moved).
    assert!(store.schedule(&q, Some(now_ms()), &seed).await?);
    let lease = store
        .acquire_lease(&q, "replica-a", Duration::from_millis(TTL_MS))
        .await?
        .context("lease")?;
    Ok((q, seed, entrants, lease))
}

/// [`Store::prepare_draw`], which must find the draw ready.
async fn ready(store: &Store, q: &QueueId, lease: &Lease, now: u64) -> anyhow::Result<DueDraw> {
    match store.prepare_draw(q, lease, TTL_MS, now).await? {
        DrawPrep::Ready(due) => Ok(due),
        other => anyhow::bail!("the draw is not ready: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draw_interrupted_between_steps_goes_on_where_it_stopped() -> anyhow::Result<()> {
    const N: usize = 2 * DRAW_STEP + DRAW_STEP / 2;
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let probe = RedisProbe::connect(&redis.url()).await?;
    let (q, seed, early, lease) = sale(&store, "steps", N, QueueConfig::default()).await?;
    let due = ready(&store, &q, &lease, now_ms()).await?;
    assert_eq!((due.after, due.recorded), (None, 0), "nothing recorded yet");
    let order = due.seed.order(None, due.entrants);
    assert_eq!(order.len(), N);

    // A replica without the lease places nothing.
    let stale = Lease {
        value: "replica-b|1".into(),
        ..lease.clone()
    };
    assert_eq!(
        store
            .draw_step(&q, &stale, TTL_MS, now_ms(), 0, &order[..10])
            .await?,
        DrawStep::LeaseLost
    );
    // More than a step is refused before Redis is asked.
    assert!(store
        .draw_step(&q, &lease, TTL_MS, now_ms(), 0, &order[..DRAW_STEP + 1])
        .await
        .is_err());

    // One step, then the same step again (a client re-sending a request whose reply it
    // lost): the second finds the record longer than it expects and does nothing.
    let step = &order[..DRAW_STEP];
    let DrawStep::Placed { placed, .. } = store
        .draw_step(&q, &lease, TTL_MS, now_ms(), 0, step)
        .await?
    else {
        anyhow::bail!("the first step placed nothing");
    };
    assert_eq!(placed, DRAW_STEP as u64);
    assert_eq!(
        store
            .draw_step(&q, &lease, TTL_MS, now_ms(), 0, step)
            .await?,
        DrawStep::Stale
    );
    // Then the replica stops. The draw is still pending: nothing is published, and its time
    // and beacon round can no longer change.
    let s = store.schedule_of(&q).await?.context("schedule")?;
    assert_eq!((s.phase, s.seed), (DrawPhase::Pending, None));
    assert!(
        !store.schedule(&q, Some(now_ms() + 60_000), &seed).await?,
        "a draw under way keeps its time"
    );
    assert_eq!(
        store.set_beacon(&q, BeaconChange::Round(Some(7))).await?,
        BeaconOutcome::NotPending,
        "and its order's key: no beacon round can be named now"
    );
    assert!(store.drawn_entrants(&q).await?.is_empty(), "not published");
    // A place drawn already has its position; one not drawn yet is still in the pre-queue.
    assert_eq!(position(&store, &q, step[0].1).await?, 1);
    assert!(matches!(
        store.status(&q, order[DRAW_STEP].1, now_ms()).await?,
        PlaceState::Scheduled { .. }
    ));
    // Joins meanwhile still go to the pre-queue; more than one call's worth.
    let late = join_pre(&store, &q, DRAW_STEP as u64 + 200, "late").await?;

    // Another replica takes the queue over, with a clock ten minutes behind (before
    // `opens_at`): a draw begun is ready whatever the clock. It reads what is left and goes
    // on after the last entrant recorded: the rest of the committed order (those who joined
    // after the draw began are not entrants of it).
    let b = store
        .acquire_lease(&q, "replica-b", Duration::from_millis(TTL_MS))
        .await?;
    assert!(b.is_none(), "replica-a still holds the lease");
    store.release_lease(&q, &lease).await?;
    let lease_b = store
        .acquire_lease(&q, "replica-b", Duration::from_millis(TTL_MS))
        .await?
        .context("lease b")?;
    let behind = now_ms() - 600_000;
    let due = ready(&store, &q, &lease_b, behind).await?;
    let last = order[DRAW_STEP - 1].0;
    assert_eq!(
        (due.after, due.recorded),
        (Some(last), 32 * DRAW_STEP as u64)
    );
    let rest = due.seed.order_after(None, due.entrants, due.after.as_ref());
    assert_eq!(rest, order[DRAW_STEP..].to_vec());
    // The first replica, back, can no longer go on.
    assert_eq!(
        store
            .run_draw(&q, &lease, TTL_MS, now_ms(), due.recorded, &rest, 0)
            .await?,
        DrawOutcome::LeaseLost
    );

    let scripts_before = probe.calls("evalsha").await?;
    let outcome = store
        .run_draw(&q, &lease_b, TTL_MS, behind, due.recorded, &rest, 0)
        .await?;
    let DrawOutcome::Done { drawn, after, .. } = outcome else {
        anyhow::bail!("draw outcome {outcome:?}");
    };
    assert_eq!(
        (drawn, after),
        (rest.len() as u64, late.len() as u64),
        "{outcome:?}"
    );
    // The steps, then the end in calls of at most a step's size too.
    let scripts = probe.calls("evalsha").await? - scripts_before;
    let least = rest.len().div_ceil(DRAW_STEP) + late.len().div_ceil(DRAW_STEP);
    assert!(scripts >= least as u64, "{scripts} script calls");

    // Published: the record is what one uninterrupted draw of the same entrants gives.
    let s = store.schedule_of(&q).await?.context("schedule")?;
    assert_eq!(s.phase, DrawPhase::Done);
    let record = store.drawn_entrants(&q).await?;
    let uninterrupted = seed.order(None, early.clone());
    assert_eq!(
        record,
        uninterrupted.iter().map(|(h, _)| *h).collect::<Vec<_>>()
    );
    // The line follows the record, then the late joins, in join order.
    let mut expected: Vec<PlaceId> = uninterrupted.iter().map(|(_, p)| *p).collect();
    let mut fifo: Vec<PlaceId> = late.iter().map(|(_, p)| *p).collect();
    fifo.sort_unstable_by_key(|p| p.0);
    expected.extend(fifo);
    for (i, place) in expected.iter().enumerate() {
        assert_eq!(
            position(&store, &q, *place).await?,
            i as u64 + 1,
            "place {place:?}"
        );
    }
    // Done once: nothing more to prepare or run.
    assert!(matches!(
        store.prepare_draw(&q, &lease_b, TTL_MS, now_ms()).await?,
        DrawPrep::NotPending
    ));
    assert_eq!(
        store
            .run_draw(&q, &lease_b, TTL_MS, now_ms(), 0, &[], 0)
            .await?,
        DrawOutcome::NotPending
    );
    Ok(())
}

/// Closing the queue while the draw's steps run drops the places drawn so far (they are in
/// the line, which a close drops) and the pre-queue alike; a reopened queue draws afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_mid_draw_treats_every_entrant_alike() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let n = DRAW_STEP + 200;
    let (q, _, _, lease) = sale(&store, "closing", n, QueueConfig::default()).await?;
    let due = ready(&store, &q, &lease, now_ms()).await?;
    let order = due.seed.order(None, due.entrants);
    store
        .draw_step(&q, &lease, TTL_MS, now_ms(), 0, &order[..DRAW_STEP])
        .await?;
    assert!(store.close_queue(&q, CloseReason::QueueClosed).await?);
    // The rest of the draw finds the queue closed.
    let recorded = 32 * DRAW_STEP as u64;
    assert_eq!(
        store
            .run_draw(
                &q,
                &lease,
                TTL_MS,
                now_ms(),
                recorded,
                &order[DRAW_STEP..],
                0
            )
            .await?,
        DrawOutcome::NotPending
    );
    store.put_queue(&q, &QueueConfig::default()).await?;
    for (_, place) in [order[0], order[DRAW_STEP]] {
        assert_eq!(
            store.status(&q, place, now_ms()).await?,
            PlaceState::Gone,
            "drawn or not, place {place:?} went with the close"
        );
    }
    // Reopened, the sale is still pending and draws whoever joins now, from scratch.
    let again = join_pre(&store, &q, 5, "again").await?;
    let due = ready(&store, &q, &lease, now_ms()).await?;
    assert_eq!((due.after, due.recorded, due.entrants.len()), (None, 0, 5));
    let order = due.seed.order(None, due.entrants);
    let outcome = store
        .run_draw(&q, &lease, TTL_MS, now_ms(), 0, &order, 0)
        .await?;
    assert!(
        matches!(
            outcome,
            DrawOutcome::Done {
                drawn: 5,
                after: 0,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert_eq!(store.drawn_entrants(&q).await?.len(), again.len());
    Ok(())
}

/// The drawn places start away (their browsers still hold pre-queue streams) and expire
/// after the grace period unless the browsers come back. A draw that took longer than half
/// of that (a replica stopped between steps) stamps those still away again at its end, so no
/// place is dropped before its browser could hear of the draw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_draw_gives_its_first_places_their_whole_grace_period() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let cfg = QueueConfig {
        grace_seconds: 60,
        ..QueueConfig::default()
    };
    let (q, _, _, lease) = sale(&store, "slow", DRAW_STEP + 10, cfg).await?;
    let start = now_ms();
    let due = ready(&store, &q, &lease, start).await?;
    let order = due.seed.order(None, due.entrants);
    let DrawStep::Placed { first: id, .. } = store
        .draw_step(&q, &lease, TTL_MS, start, 0, &order[..DRAW_STEP])
        .await?
    else {
        anyhow::bail!("the first step placed nothing");
    };
    // The step's places in line: ids `id ..` in drawn order.
    let (first, second) = (PlaceId(id), PlaceId(id + 1));
    // Each place's expiry in the away set (`None`: not away), read as a test's probe.
    let away = QueueKeys::new(&q).away;
    let conn = redis::Client::open(redis.url())?
        .get_multiplexed_async_connection()
        .await?;
    let expiry = |place: PlaceId| {
        let (away, mut c) = (away.clone(), conn.clone());
        async move {
            let v: Option<u64> = redis::cmd("ZSCORE")
                .arg(&away)
                .arg(place.0)
                .query_async(&mut c)
                .await?;
            anyhow::Ok(v)
        }
    };
    assert_eq!(expiry(first).await?, Some(start + 60_000));
    // The second place's browser comes back: it is no longer away.
    let _: u64 = redis::cmd("ZREM")
        .arg(&away)
        .arg(second.0)
        .query_async(&mut conn.clone())
        .await?;
    // The draw ends ten minutes later.
    let end = start + 600_000;
    let due = ready(&store, &q, &lease, end).await?;
    let rest = due.seed.order_after(None, due.entrants, due.after.as_ref());
    store
        .run_draw(&q, &lease, TTL_MS, end, due.recorded, &rest, 0)
        .await?;
    assert_eq!(expiry(first).await?, Some(end + 60_000), "stamped again");
    assert_eq!(expiry(second).await?, None, "a browser back stays back");
    Ok(())
}

/// A gateway that saw Redis lose its data puts its pre-queue places back (a restore it
/// repeats when a batch failed half way may land after the draw's first steps): places the
/// draw placed already stay where it put them, and none is queued twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_repeated_mid_draw_keeps_the_drawn_places() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let n = DRAW_STEP + 100;
    let (q, seed, early, lease) = sale(&store, "restored", n, QueueConfig::default()).await?;
    let due = ready(&store, &q, &lease, now_ms()).await?;
    let order = due.seed.order(None, due.entrants);
    store
        .draw_step(&q, &lease, TTL_MS, now_ms(), 0, &order[..DRAW_STEP])
        .await?;
    // A gateway's restore of the pre-queue places (here all of them: it holds their
    // browsers), with the commitment it saw, in join order.
    let commitment = seed.commitment();
    let mut held: Vec<(PlaceId, EntrantHash)> = early.iter().map(|(h, p)| (*p, *h)).collect();
    held.sort_unstable_by_key(|(p, _)| p.0);
    let seen = SeenDraw {
        commitment: Some(&commitment),
        opens_at_ms: None,
    };
    let restored = store
        .restore_pre_queue(&q, 0, &held, seen, now_ms())
        .await?;
    assert!(
        matches!(
            restored,
            PreRestore::Done {
                fate: PreQueueFate::Kept,
                restored: 0,
                ..
            }
        ),
        "{restored:?}"
    );
    // The draw goes on and ends: the line is the drawn order, each place once.
    let due = ready(&store, &q, &lease, now_ms()).await?;
    let rest = due.seed.order_after(None, due.entrants, due.after.as_ref());
    assert_eq!(rest.to_vec(), order[DRAW_STEP..].to_vec());
    let outcome = store
        .run_draw(&q, &lease, TTL_MS, now_ms(), due.recorded, &rest, 0)
        .await?;
    assert!(
        matches!(outcome, DrawOutcome::Done { after: 0, .. }),
        "{outcome:?}"
    );
    for (i, (_, place)) in order.iter().enumerate() {
        assert_eq!(
            position(&store, &q, *place).await?,
            i as u64 + 1,
            "place {place:?}"
        );
    }
    Ok(())
}

/// Nobody is admitted while a draw is under way, and no drawn place expires, whichever replica
/// ticks (the tick script itself checks, not only the dispatcher that runs the draw). Once
/// the draw is done, admission starts with the first drawn place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_admits_nobody_while_a_draw_is_under_way() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let cfg = QueueConfig {
        admit_per_second: 1000.0,
        grace_seconds: 1,
        ..QueueConfig::default()
    };
    let (q, _, _, lease) = sale(&store, "ticking", DRAW_STEP + 50, cfg).await?;
    let start = now_ms();
    let due = ready(&store, &q, &lease, start).await?;
    let order = due.seed.order(None, due.entrants);
    store
        .draw_step(&q, &lease, TTL_MS, start, 0, &order[..DRAW_STEP])
        .await?;
    // Ticks past the drawn places' grace period: nothing admitted, nothing dropped.
    let later = start + 5_000;
    for tick in
        usher_testkit::tick_calls(&store, &q, &usher_testkit::tick_args(&lease, later)).await?
    {
        let Tick::Ticked(out) = tick else {
            anyhow::bail!("an open queue ticks");
        };
        assert_eq!((out.admitted, out.dropped), (0, 0), "{out:?}");
    }
    // The draw ends; the next tick admits the first drawn place first, and drops nobody
    // (the end stamped the places still away again).
    let due = ready(&store, &q, &lease, later).await?;
    let rest = due.seed.order_after(None, due.entrants, due.after.as_ref());
    store
        .run_draw(&q, &lease, TTL_MS, later, due.recorded, &rest, 0)
        .await?;
    let resumed = store.resume(&q, order[0].1, 0, later).await?;
    assert!(
        matches!(resumed, PlaceState::Waiting { position: 1, .. }),
        "{resumed:?}"
    );
    let ticks =
        usher_testkit::tick_calls(&store, &q, &usher_testkit::tick_args(&lease, later + 100))
            .await?;
    let Some(Tick::Ticked(out)) = ticks.first() else {
        anyhow::bail!("an open queue ticks");
    };
    assert!(out.admitted > 0, "{out:?}");
    assert_eq!(out.dropped, 0, "{out:?}");
    assert!(matches!(
        store.status(&q, order[0].1, later + 100).await?,
        PlaceState::Admitted(_) | PlaceState::AdmissionPending
    ));
    Ok(())
}

/// Naming a sale's beacon round again, as a settings push that repeats it does, keeps the
/// randomness recorded for it (it used to be forgotten, and the draw waited for it again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn naming_the_same_beacon_round_again_keeps_its_randomness() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("beacon")?;
    store.put_queue(&q, &QueueConfig::default()).await?;
    store
        .schedule(&q, Some(now_ms() + 3_600_000), &Seed::generate())
        .await?;
    let randomness = "ab".repeat(32);
    for change in [
        BeaconChange::Round(Some(5)),
        BeaconChange::Randomness(&randomness),
        BeaconChange::Round(Some(5)),
    ] {
        assert_eq!(store.set_beacon(&q, change).await?, BeaconOutcome::Set);
    }
    let beacon = store.schedule_of(&q).await?.and_then(|s| s.beacon);
    assert_eq!(beacon.and_then(|b| b.randomness), Some(randomness), "kept");
    // Another round forgets it.
    store.set_beacon(&q, BeaconChange::Round(Some(6))).await?;
    let beacon = store.schedule_of(&q).await?.and_then(|s| s.beacon);
    assert_eq!(beacon.and_then(|b| b.randomness), None);
    Ok(())
}

/// A restore repeated after some of its places went away (a gateway retries a restore that
/// failed half way, while its browsers come and go): the draw was void, so the places went
/// into the line, and an away place is in `parked`. The repeat puts each place back once, in
/// `waiting`: none is in the line twice, so nobody behind it moves back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_repeated_after_places_went_away_lines_each_up_once() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("void-again")?;
    // Configured again without `opens_at`: the draw the browsers joined is void, and their
    // places go into the line in join order.
    store.put_queue(&q, &QueueConfig::default()).await?;
    let held: Vec<(PlaceId, EntrantHash)> = (1..=10)
        .map(|p| (PlaceId(p), EntrantHash::of_ticket(&format!("{q}.{p}"))))
        .collect();
    let seen = SeenDraw {
        commitment: None,
        opens_at_ms: None,
    };
    let first = store
        .restore_pre_queue(&q, 0, &held, seen, now_ms())
        .await?;
    assert!(
        matches!(
            first,
            PreRestore::Done {
                fate: PreQueueFate::Void,
                restored: 10,
                ..
            }
        ),
        "{first:?}"
    );
    let away: Vec<PlaceId> = held[..3].iter().map(|(p, _)| *p).collect();
    assert_eq!(store.mark_away(&q, &away, 0, now_ms()).await?, 3);
    let again = store
        .restore_pre_queue(&q, 0, &held, seen, now_ms())
        .await?;
    assert!(
        matches!(again, PreRestore::Done { restored: 0, .. }),
        "nothing was lost the second time: {again:?}"
    );
    for (i, (place, _)) in held.iter().enumerate() {
        assert_eq!(
            position(&store, &q, *place).await?,
            i as u64 + 1,
            "place {place:?}"
        );
    }
    Ok(())
}
