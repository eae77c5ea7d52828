//! Admission bursts: a tick's first script call is short, so its first browsers are on their
//! way while the next calls admit the rest (`usher_dispatcher::tick` `FIRST_CALL`).

use std::time::Duration;

use usher_core::ids::QueueId;
use usher_core::store::{QueueConfig, Store, Tick, ADMIT_PER_CALL};
use usher_core::time::now_ms;
use usher_testkit::probe;

/// A short first call (`Store::tick_up_to`) followed by full ones admits exactly the tick's
/// budget, in line order, each place once: the first call stops at its size and says `more`,
/// leaves the rest of the budget to the next calls at the same admission time, and takes no
/// snapshot (only the last call does); a call after the last admits nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_first_call_then_full_ones_spend_exactly_the_ticks_budget() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("burst")?;
    // The queue's first tick is budgeted for 100 ms: 1,300 places.
    let config = QueueConfig {
        admit_per_second: 13_000.0,
        ..Default::default()
    };
    store.put_queue(&q, &config).await?;
    let lease = store
        .acquire_lease(&q, "test", Duration::from_secs(600))
        .await?
        .ok_or_else(|| anyhow::anyhow!("the lease of a new queue is free"))?;
    for _ in 0..1_400 {
        probe::join(&store, &q, 7, now_ms()).await?;
    }
    let now = now_ms();
    let args = usher_testkit::tick_args(&lease, now);

    let Tick::Ticked(first) = store.tick_up_to(&q, &args, 250).await? else {
        panic!("open queue ticks")
    };
    assert_eq!((first.admitted, first.more), (250, true));
    assert!(
        first.runs.is_empty(),
        "only the last call takes the snapshot"
    );
    let mut calls = vec![(first.admitted, first.more, first.waiting)];
    let mut places: Vec<u64> = first.fresh.iter().map(|e| e.place.0).collect();
    for tick in usher_testkit::tick_calls(&store, &q, &args).await? {
        let Tick::Ticked(out) = tick else {
            panic!("open queue ticks")
        };
        assert!(out.admitted <= ADMIT_PER_CALL, "{}", out.admitted);
        assert!(out.fresh.iter().all(|e| e.admitted_at_ms == now));
        places.extend(out.fresh.iter().map(|e| e.place.0));
        calls.push((out.admitted, out.more, out.waiting));
    }
    assert_eq!(
        calls,
        vec![(250, true, 1_150), (1_000, true, 150), (50, false, 100)]
    );
    assert!(
        places.windows(2).all(|w| w[0] < w[1]),
        "line order, once each"
    );
    assert_eq!(places.len(), 1_300);
    let Tick::Ticked(again) = store.tick_up_to(&q, &args, 250).await? else {
        panic!("open queue ticks")
    };
    assert_eq!((again.admitted, again.more), (0, false), "no budget left");
    Ok(())
}
