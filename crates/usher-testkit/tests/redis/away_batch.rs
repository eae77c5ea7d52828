//! Marking many places away in one call (`Store::mark_away`, `lua/away.lua`: a gateway sends
//! the disconnects of a moment together), at the store, on a real Redis, with a synthetic
//! clock. A batch parks exactly the places the gateway still holds, each in its own lane at
//! its exact spot, with its grace period's end; a place parked already keeps its deadline;
//! with a grace period of 0 they leave the line; a batch larger than one script call (1,000
//! places) is marked whole.

use usher_core::ids::{PlaceId, QueueId};
use usher_core::lanes::{Lane, LaneName, Lanes};
use usher_core::store::{PlaceState, QueueConfig, Store};
use usher_testkit::line::take_lease;
use usher_testkit::{tick_at, RedisServer};

const T0: u64 = 1_900_000_000_000;
const GRACE_MS: u64 = 60_000;

fn name(s: &str) -> LaneName {
    LaneName::new(s).expect("valid lane name")
}

/// A queue with lanes `members` 30 % and `general` 70 % (the default), `grace_ms` of grace.
async fn queue(store: &Store, id: &str, grace_ms: u64) -> anyhow::Result<QueueId> {
    let q = QueueId::new(id)?;
    let config = QueueConfig {
        admit_per_second: 10.0,
        grace_seconds: grace_ms / 1000,
        session_ttl_seconds: 3600,
        passthrough: false,
        ..QueueConfig::default()
    };
    store.put_queue(&q, &config).await?;
    let lane = |n: &str, share| Lane {
        name: name(n),
        share,
    };
    let lanes = Lanes::new(vec![lane("general", 70), lane("members", 30)], None)?;
    store.put_lanes(&q, &lanes).await?;
    Ok(q)
}

/// `n` places joined at `T0` through gateway `gw` into `lane` (None: the default lane).
async fn join(
    store: &Store,
    q: &QueueId,
    gw: u16,
    lane: Option<&LaneName>,
    n: usize,
) -> anyhow::Result<Vec<PlaceId>> {
    let b = store
        .join_in_lane(q, gw, T0, &vec![None; n], &[], lane)
        .await?;
    (0..n)
        .map(|i| match b.outcome(i) {
            Ok(PlaceState::Waiting { place, .. }) => Ok(place),
            other => anyhow::bail!("join {i}: {other:?}"),
        })
        .collect()
}

/// A Redis and a queue `id` (see [`queue`]) with `members` places in lane `members` and then
/// `plain` in the default lane, all joined through gateway 1: the store, the queue, and the
/// two lists of places in line order.
async fn line_of(
    id: &str,
    grace_ms: u64,
    members: usize,
    plain: usize,
) -> anyhow::Result<(RedisServer, Store, QueueId, Vec<PlaceId>, Vec<PlaceId>)> {
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = queue(&store, id, grace_ms).await?;
    let m = join(&store, &q, 1, Some(&name("members")), members).await?;
    let d = join(&store, &q, 1, None, plain).await?;
    Ok((redis, store, q, m, d))
}

/// `place`'s (position, waiting) at `now`.
async fn spot(store: &Store, q: &QueueId, place: PlaceId, now: u64) -> anyhow::Result<(u64, u64)> {
    match store.status(q, place, now).await? {
        PlaceState::Waiting {
            position, waiting, ..
        } => Ok((position, waiting)),
        other => anyhow::bail!("{place:?}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_parks_each_place_its_gateway_holds_in_its_lane() -> anyhow::Result<()> {
    let (_redis, store, q, m, d) = line_of("batch", GRACE_MS, 3, 3).await?;
    // The default lane's last place is gateway 2's.
    let x = join(&store, &q, 2, None, 1).await?[0];
    let before = [
        spot(&store, &q, m[2], T0).await?,
        spot(&store, &q, d[2], T0).await?,
        spot(&store, &q, x, T0).await?,
    ];

    // d[1]'s browser dropped first, at T0.
    assert_eq!(store.mark_away(&q, &[d[1]], 1, T0).await?, 1);
    // Then a batch through gateway 1, at T0 + 1: d[1] parked already, x held by gateway 2,
    // a place nobody took.
    let batch = [m[0], m[1], d[0], d[1], x, PlaceId(T0 * 10), m[2]];
    assert_eq!(
        store.mark_away(&q, &batch, 1, T0 + 1).await?,
        5,
        "m0, m1, d0 and m2 parked, d1 parked already; x is gateway 2's"
    );

    // Everyone keeps their spot: the away places still count in the line.
    let after = [
        spot(&store, &q, m[2], T0 + 1).await?,
        spot(&store, &q, d[2], T0 + 1).await?,
        spot(&store, &q, x, T0 + 1).await?,
    ];
    assert_eq!(before, after);

    // Each deadline is its own mark's: at d1's (T0 + grace) only d1 is dropped; a
    // millisecond later the four the batch parked. The ticks' budget goes to d2 and x.
    let lease = take_lease(&store, &q).await?;
    assert_eq!(tick_at(&store, &q, &lease, T0 + GRACE_MS).await?.dropped, 1);
    assert!(matches!(
        store.status(&q, d[0], T0 + GRACE_MS).await?,
        PlaceState::Waiting { .. }
    ));
    assert_eq!(
        tick_at(&store, &q, &lease, T0 + GRACE_MS + 1)
            .await?
            .dropped,
        4
    );
    for p in [m[0], m[1], m[2], d[0], d[1]] {
        let state = store.status(&q, p, T0 + GRACE_MS + 1).await?;
        assert!(
            !matches!(
                state,
                PlaceState::Waiting { .. } | PlaceState::Admitted { .. }
            ),
            "{p:?} dropped: {state:?}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_comes_back_whole_in_its_lanes() -> anyhow::Result<()> {
    let (_redis, store, q, m, d) = line_of("back", GRACE_MS, 2, 2).await?;
    let all = [m[0], m[1], d[0], d[1]];
    assert_eq!(store.mark_away(&q, &all, 1, T0).await?, 4);
    assert_eq!(store.mark_back(&q, &all, 1).await?, 4, "all four were away");
    assert_eq!(store.mark_back(&q, &all, 1).await?, 0, "and none is now");
    // Back where they stood, each in its lane ...
    for (p, lane) in [(m[1], Some(name("members"))), (d[1], None)] {
        match store.status(&q, p, T0).await? {
            PlaceState::Waiting {
                position, lane: l, ..
            } => assert_eq!((position, l), (2, lane)),
            other => anyhow::bail!("{p:?}: {other:?}"),
        }
    }
    // ... and where the tick reads (it never admits a parked place): two ticks' budget, one
    // place and then ten, admits all four.
    let lease = take_lease(&store, &q).await?;
    let first = tick_at(&store, &q, &lease, T0).await?.admitted;
    let second = tick_at(&store, &q, &lease, T0 + 1_000).await?.admitted;
    assert_eq!((first, first + second), (1, 4));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_grace_a_batch_leaves_the_line_at_once() -> anyhow::Result<()> {
    let (_redis, store, q, m, d) = line_of("nograce", 0, 2, 2).await?;
    assert_eq!(store.mark_away(&q, &[m[0], d[0]], 1, T0).await?, 2);
    for p in [m[0], d[0]] {
        let state = store.status(&q, p, T0).await?;
        assert!(
            !matches!(state, PlaceState::Waiting { .. }),
            "{p:?} left: {state:?}"
        );
    }
    // The others moved up in their lanes.
    assert_eq!(spot(&store, &q, m[1], T0).await?, (1, 1));
    assert_eq!(spot(&store, &q, d[1], T0).await?, (1, 1));
    Ok(())
}

/// More places than one script call takes (1,000), every place named twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_larger_than_one_call_is_marked_whole() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = queue(&store, "large", GRACE_MS).await?;
    let mut places = Vec::new();
    while places.len() < 1_200 {
        places.extend(join(&store, &q, 1, None, 100).await?);
    }
    let tail = join(&store, &q, 1, None, 1).await?[0];
    // In order, then again (the store sends 1,000 places a call).
    let twice: Vec<_> = places.iter().chain(places.iter()).copied().collect();
    let marked = store.mark_away(&q, &twice, 1, T0).await?;
    // The second naming of a place comes in another call, where it is parked already and
    // counts again.
    assert_eq!(marked, 2_400);
    assert_eq!(store.mark_back(&q, &places, 1).await?, 1_200);
    assert_eq!(spot(&store, &q, tail, T0).await?, (1_201, 1_201));
    Ok(())
}
