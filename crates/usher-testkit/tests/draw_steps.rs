//! A scheduled sale's draw runs in steps of `DRAW_STEP` places, one script call each, so a
//! big pre-queue never holds Redis for the whole draw (BENCHMARKS.md, "Scheduled sale: the
//! draw"). A draw interrupted between steps (a crash, a lost lease) stays pending; the next
//! lease holder goes on after the last entrant recorded, and the line and the published
//! record come out as one uninterrupted draw of the same entrants would have made them.
//!
//! Driven through `usher_core::store` against a real `redis-server`, as the dispatcher drives
//! it: the interruption is placed exactly between two steps.

use std::time::Duration;

use anyhow::Context;
use usher_core::draw::{EntrantHash, Seed};
use usher_core::ids::{PlaceId, QueueId};
use usher_core::store::{
    BeaconChange, BeaconOutcome, DrawOutcome, DrawPhase, DrawStep, Joined, Lease, PlaceState,
    QueueConfig, Store, DRAW_STEP,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draw_interrupted_between_steps_goes_on_where_it_stopped() -> anyhow::Result<()> {
    const N: usize = 2 * DRAW_STEP + DRAW_STEP / 2;
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let probe = RedisProbe::connect(&redis.url()).await?;
    let q = QueueId::new("steps")?;
    store.put_queue(&q, &QueueConfig::default()).await?;
    let seed = Seed::generate();
    store
        .schedule(&q, Some(now_ms() + 3_600_000), &seed)
        .await?;
    let early = join_pre(&store, &q, N as u64, "early").await?;
    // Due now (a pending sale keeps its seed when moved).
    assert!(store.schedule(&q, Some(now_ms()), &seed).await?);
    let lease = store
        .acquire_lease(&q, "replica-a", Duration::from_secs(60))
        .await?
        .context("lease")?;
    let due = store.due_draw(&q, now_ms()).await?.context("draw due")?;
    assert_eq!(due.after, None, "nothing recorded yet");
    let order = due.seed.order(None, due.entrants);
    assert_eq!(order.len(), N);

    // A replica without the lease places nothing.
    let stale = Lease {
        value: "replica-b".into(),
        ..lease.clone()
    };
    assert_eq!(
        store.draw_step(&q, &stale, now_ms(), &order[..10]).await?,
        DrawStep::LeaseLost
    );
    // More than a step is refused before Redis is asked.
    assert!(store
        .draw_step(&q, &lease, now_ms(), &order[..DRAW_STEP + 1])
        .await
        .is_err());

    // One step, then the replica stops.
    let DrawStep::Placed { placed, .. } = store
        .draw_step(&q, &lease, now_ms(), &order[..DRAW_STEP])
        .await?
    else {
        anyhow::bail!("the first step placed nothing");
    };
    assert_eq!(placed, DRAW_STEP as u64);
    // Still pending: nothing is published, and the time can no longer move.
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
    // Joins meanwhile still go to the pre-queue.
    let late = join_pre(&store, &q, 40, "late").await?;

    // The next holder reads what is left and goes on after the last entrant recorded: the
    // rest of the committed order, plus the late entrants that sort after that point.
    let due = store
        .due_draw(&q, now_ms())
        .await?
        .context("the draw is still due")?;
    let last = order[DRAW_STEP - 1].0;
    assert_eq!(due.after, Some(last));
    let rest = due.seed.order_after(None, due.entrants, due.after.as_ref());
    let late_drawn = seed.order_after(None, late.clone(), Some(&last));
    assert_eq!(rest.len(), N - DRAW_STEP + late_drawn.len());
    let rest_of_early: Vec<_> = rest
        .iter()
        .filter(|(h, _)| early.iter().any(|(e, _)| e == h))
        .copied()
        .collect();
    assert_eq!(rest_of_early, order[DRAW_STEP..].to_vec());

    let scripts_before = probe.calls("evalsha").await?;
    let outcome = store.run_draw(&q, &lease, now_ms(), &rest).await?;
    let DrawOutcome::Done { drawn, after, .. } = outcome else {
        anyhow::bail!("draw outcome {outcome:?}");
    };
    let late_fifo = late.len() - late_drawn.len();
    assert_eq!(
        (drawn, after),
        (rest.len() as u64, late_fifo as u64),
        "{outcome:?}"
    );
    let scripts = probe.calls("evalsha").await? - scripts_before;
    assert!(
        scripts > rest.len().div_ceil(DRAW_STEP) as u64,
        "{scripts} script calls: the steps, then the draw's end"
    );

    // Published: the record is what one uninterrupted draw of the same entrants records.
    let s = store.schedule_of(&q).await?.context("schedule")?;
    assert_eq!(s.phase, DrawPhase::Done);
    let record = store.drawn_entrants(&q).await?;
    let mut all_drawn: Vec<_> = early.clone();
    all_drawn.extend(late_drawn.iter().copied());
    let uninterrupted = seed.order(None, all_drawn);
    assert_eq!(
        record,
        uninterrupted.iter().map(|(h, _)| *h).collect::<Vec<_>>()
    );
    // The line follows the record, then the late entrants the draw did not name, in join
    // order.
    let mut expected: Vec<PlaceId> = uninterrupted.iter().map(|(_, p)| *p).collect();
    let mut fifo: Vec<PlaceId> = late
        .iter()
        .filter(|(h, _)| !late_drawn.iter().any(|(d, _)| d == h))
        .map(|(_, p)| *p)
        .collect();
    fifo.sort_unstable_by_key(|p| p.0);
    expected.extend(fifo);
    for (i, place) in expected.iter().enumerate() {
        assert_eq!(
            position(&store, &q, *place).await?,
            i as u64 + 1,
            "place {place:?}"
        );
    }
    // Done once: another call changes nothing.
    assert_eq!(
        store.run_draw(&q, &lease, now_ms(), &[]).await?,
        DrawOutcome::NotPending
    );
    Ok(())
}
