//! The clock seam a rehearsal (`usher-rehearse`) drives a virtual day through: store calls
//! that take `now`, and a dispatcher `Admitter` that takes its time from an injected clock.
//! Each test runs at a virtual time years before the wall clock's, so a time read from the
//! wall clock anywhere on these paths would show.

use std::sync::Arc;
use std::time::Duration;

use usher_core::ids::{QueueId, ServerId};
use usher_core::store::{LeaveOutcome, PlaceState, QueueConfig, Store, TickArgs};
use usher_core::time::VirtualClock;
use usher_dispatcher::tick::{Admitter, Settings};
use usher_testkit::probe;

/// 2001-09-09T01:46:40Z: long before any wall clock these tests run on.
const T0: u64 = 1_000_000_000_000;

async fn queue(
    redis: &usher_testkit::RedisServer,
    admit_per_second: f64,
) -> anyhow::Result<(Store, QueueId)> {
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("rehearsed")?;
    store
        .put_queue(
            &q,
            &QueueConfig {
                admit_per_second,
                ..Default::default()
            },
        )
        .await?;
    Ok((store, q))
}

/// A session released with `leave_at` is remembered in `ended` for the token's cap from the
/// given time: a tick past that time forgets it (the place is then simply gone), while one
/// before still tells a resume `session_ended`. With the wall clock's now, the record would
/// outlive every virtual tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leave_at_remembers_a_released_session_from_the_given_time() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let (store, q) = queue(&redis, 10.0).await?;
    let gw = store
        .register_gateway(&ServerId::new("gw-a")?, T0, Duration::from_secs(86_400))
        .await?;
    let PlaceState::Waiting { place, .. } = probe::join(&store, &q, gw, T0).await? else {
        anyhow::bail!("the join did not wait");
    };
    let lease = store
        .acquire_lease(&q, "rehearsal", Duration::from_secs(600))
        .await?
        .ok_or_else(|| anyhow::anyhow!("the lease of a new queue is free"))?;
    let gateways = store.gateways(T0).await?;
    let tick = |now_ms| TickArgs {
        now_ms,
        clock_ms: None,
        first_elapsed_ms: 1000,
        max_elapsed_ms: 1000,
        exact: 10,
        max_position_error: 0.01,
        store_rate: None,
        lease: &lease,
        lease_ttl_ms: 600_000,
        gateways: &gateways,
        bucket_rate: None,
        tick_ms: 100,
    };
    store.tick(&q, &tick(T0)).await?;
    let cap_ms = store
        .queue_config(&q)
        .await?
        .map(|c| c.max_session_seconds * 1000)
        .ok_or_else(|| anyhow::anyhow!("queue settings"))?;
    let left = T0 + 60_000;
    assert_eq!(
        store.leave_at(&q, place, left).await?,
        LeaveOutcome::Released
    );
    // Just before the record's end, a tick keeps it: the place's session ended.
    store.tick(&q, &tick(left + cap_ms - 1)).await?;
    assert_eq!(
        store.status(&q, place, left + cap_ms - 1).await?,
        PlaceState::SessionEnded
    );
    // Past it, the tick forgets the record: it was kept from the virtual time of the leave.
    store.tick(&q, &tick(left + cap_ms + 1)).await?;
    assert_eq!(
        store.status(&q, place, left + cap_ms + 1).await?,
        PlaceState::Gone
    );
    Ok(())
}

/// An `Admitter` on a virtual clock takes its first lease, stamps its admissions and budgets
/// its rate on that clock: a line of 30 at 10 a second is admitted 1 at the first tick (one
/// tick's budget), then 10 a virtual second, each stamped with its virtual tick's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admitter_on_a_virtual_clock_admits_on_that_clock() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let (store, q) = queue(&redis, 10.0).await?;
    let clock = VirtualClock::starting_at(T0);
    let gw = store
        .register_gateway(&ServerId::new("gw-a")?, T0, Duration::from_secs(86_400))
        .await?;
    let mut places = Vec::new();
    for _ in 0..30 {
        match probe::join(&store, &q, gw, T0).await? {
            PlaceState::Waiting { place, .. } => places.push(place),
            other => anyhow::bail!("join: {other:?}"),
        }
    }
    let settings = Settings {
        replica: "rehearsal".into(),
        tick: Duration::from_millis(100),
        lease_ttl: Duration::from_secs(600),
        exact_positions: 100,
        redis: usher_core::store::RedisArgs::standalone(redis.url()),
    };
    let key = Arc::new(usher_mint::token::SigningKey::from_pkcs8_pem(
        &usher_mint::token::SigningKey::generate_pem()?,
    )?);
    let mut admitter = Admitter::new(store.clone(), key, settings).with_clock(clock.clone());
    let mut admitted = Vec::new();
    for (i, at) in [T0, T0 + 1000, T0 + 2000].into_iter().enumerate() {
        clock.set_ms(at);
        let report = admitter.tick().await?;
        admitted.push(report.admitted);
        let last = places[admitted.iter().sum::<u64>() as usize - 1];
        match store.status(&q, last, at).await? {
            PlaceState::Admitted(record) => assert_eq!(
                record.admitted_at_ms, at,
                "tick {i} is stamped with the virtual clock's time"
            ),
            other => anyhow::bail!("tick {i}: place {last:?} is {other:?}"),
        }
    }
    assert_eq!(admitted, vec![1, 10, 10]);
    Ok(())
}
