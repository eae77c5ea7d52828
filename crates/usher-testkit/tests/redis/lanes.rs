//! Lanes with guaranteed shares (issue 24, item 2) at the store, on a real Redis, with a
//! synthetic clock: every tick script call is given its `now`, so "20 s at 100/s" is 200
//! ticks of 100 ms run as fast as Redis answers. Shares hold within ±2 %, each lane is first
//! come first served, a lane nobody is in gives its share away, each lane's ETA (its position
//! ÷ its effective rate) is within 10 % of when it is admitted, and the settings refuse what
//! would strand a place.

use usher_core::ids::{PlaceId, QueueId};
use usher_core::lanes::{lane_rate, Lane, LaneName, Lanes};
use usher_core::store::{
    LanesWrite, PlaceState, QueueConfig, Store, StoreError, Tick, JOIN_BATCH_MAX,
};
use usher_testkit::line::take_lease;
use usher_testkit::{tick_args, tick_calls};

const T0: u64 = 1_900_000_000_000;

fn name(s: &str) -> LaneName {
    LaneName::new(s).expect("valid lane name")
}

fn lanes(spec: &[(&str, u8)], default: Option<&str>) -> Lanes {
    let l = spec
        .iter()
        .map(|(n, share)| Lane {
            name: name(n),
            share: *share,
        })
        .collect();
    Lanes::new(l, default.map(name)).expect("valid lanes")
}

/// A queue admitting `rate` per second with lanes `members` 30 % and `general` 70 % (the
/// default), grace long enough that nothing expires.
async fn queue(store: &Store, id: &str, rate: f64) -> anyhow::Result<QueueId> {
    let q = QueueId::new(id)?;
    store
        .put_queue(
            &q,
            &QueueConfig {
                admit_per_second: rate,
                grace_seconds: 3600,
                session_ttl_seconds: 3600,
                ..QueueConfig::default()
            },
        )
        .await?;
    let w = store
        .put_lanes(&q, &lanes(&[("general", 70), ("members", 30)], None))
        .await?;
    assert_eq!(w, LanesWrite::Written);
    Ok(q)
}

/// Joins `n` places into `lane` (None: the default lane); their ids, in join order.
async fn join(
    store: &Store,
    q: &QueueId,
    lane: Option<&LaneName>,
    n: usize,
) -> anyhow::Result<Vec<u64>> {
    let mut ids = Vec::new();
    let mut left = n;
    while left > 0 {
        let k = left.min(JOIN_BATCH_MAX);
        let b = store
            .join_in_lane(q, 1, T0, &vec![None; k], &[], lane)
            .await?;
        for i in 0..k {
            match b.outcome(i) {
                Ok(PlaceState::Waiting { place, .. }) => ids.push(place.0),
                other => anyhow::bail!("join {i}: {other:?}"),
            }
        }
        left -= k;
    }
    Ok(ids)
}

/// Runs whole ticks every 100 ms of synthetic time from `from_ms` for `ticks` ticks; the
/// places admitted, in admission order, with the synthetic time of their tick.
async fn run(
    store: &Store,
    q: &QueueId,
    from_ms: u64,
    ticks: u64,
) -> anyhow::Result<Vec<(u64, u64)>> {
    let lease = take_lease(store, q).await?;
    let mut admitted = Vec::new();
    for i in 0..ticks {
        let now = from_ms + i * 100;
        for t in tick_calls(store, q, &tick_args(&lease, now)).await? {
            let Tick::Ticked(o) = t else {
                anyhow::bail!("tick {i}: {t:?}")
            };
            admitted.extend(o.fresh.iter().map(|e| (e.place.0, now)));
        }
    }
    Ok(admitted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_hold_within_two_percent_and_each_lane_is_fifo() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = queue(&store, "shares", 100.0).await?;
    // More than 20 s of each lane's share waits, joined interleaved in one order of arrival.
    let mut members = Vec::new();
    let mut general = Vec::new();
    for _ in 0..4 {
        members.extend(join(&store, &q, Some(&name("members")), 200).await?);
        general.extend(join(&store, &q, None, 400).await?);
    }
    let admitted = run(&store, &q, T0, 200).await?;
    let total = admitted.len() as f64;
    assert!(
        (1990.0..=2010.0).contains(&total),
        "20 s at 100/s admits 2,000, not {total}"
    );
    let m: Vec<u64> = admitted
        .iter()
        .map(|a| a.0)
        .filter(|p| members.contains(p))
        .collect();
    let g: Vec<u64> = admitted
        .iter()
        .map(|a| a.0)
        .filter(|p| general.contains(p))
        .collect();
    assert_eq!(m.len() + g.len(), admitted.len(), "only places that joined");
    let share = m.len() as f64 / total;
    assert!(
        (share - 0.30).abs() <= 0.02,
        "members got {share:.3} of admissions, not 30 % ± 2 %"
    );
    // FIFO per lane: each lane's admissions are its first places, in the order they joined.
    assert_eq!(
        m,
        members[..m.len()],
        "members admitted first come first served"
    );
    assert_eq!(
        g,
        general[..g.len()],
        "general admitted first come first served"
    );
    // Every tick shares too, not only the total: no second of the 20 strays by more than 2
    // places of its 30.
    for second in 0..20 {
        let from = T0 + second * 1000;
        let in_second = admitted
            .iter()
            .filter(|(p, at)| (from..from + 1000).contains(at) && members.contains(p))
            .count();
        assert!(
            (28..=32).contains(&in_second),
            "second {second}: {in_second} members admitted, not about 30"
        );
    }
    // Each lane's count in the admin view.
    let counts = store.lane_counts(&q).await?;
    let by = |n: &str| {
        counts
            .iter()
            .find(|c| c.name.as_str() == n)
            .map(|c| c.waiting)
    };
    assert_eq!(by("members"), Some(800 - m.len() as u64));
    assert_eq!(by("general"), Some(1600 - g.len() as u64));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_a_lane_cannot_use_flows_to_the_others() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = queue(&store, "conserve", 100.0).await?;
    let members = join(&store, &q, Some(&name("members")), 20).await?;
    let general = join(&store, &q, None, 500).await?;
    // 3 s at 100/s: members' 20 go in their share's time, then general takes the whole rate.
    let admitted = run(&store, &q, T0, 30).await?;
    assert!(
        admitted.len() >= 295,
        "the whole rate is used: {} admitted in 3 s at 100/s",
        admitted.len()
    );
    let m = admitted.iter().filter(|a| members.contains(&a.0)).count();
    assert_eq!(m, 20, "every member admitted");
    let last_member_at = admitted
        .iter()
        .filter(|a| members.contains(&a.0))
        .map(|a| a.1)
        .max()
        .unwrap_or(0);
    assert!(
        last_member_at < T0 + 1000,
        "members' share is 30/s: 20 of them are in within the first second"
    );
    assert_eq!(
        admitted.len() - m,
        admitted.iter().filter(|a| general.contains(&a.0)).count()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_lanes_eta_is_within_ten_percent_at_a_constant_rate() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = queue(&store, "eta", 50.0).await?;
    let members = join(&store, &q, Some(&name("members")), 300).await?;
    let general = join(&store, &q, None, 700).await?;
    let config = store.queue_lanes(&q).await?;
    let busy = [&config.lanes()[0].name, &config.lanes()[1].name];
    // A place's position in its own lane, and the ETA the gateway would show for it.
    let mut predicted = Vec::new();
    for (lane, place) in [
        ("members", members[59]),
        ("members", members[239]),
        ("general", general[139]),
        ("general", general[559]),
    ] {
        let PlaceState::Waiting {
            position,
            lane: l,
            rate: told,
            ..
        } = store.status(&q, PlaceId(place), T0).await?
        else {
            anyhow::bail!("{place} is waiting")
        };
        let expected_lane = (lane != "general").then(|| name(lane));
        assert_eq!(l, expected_lane, "status names a non-default lane");
        let rate = lane_rate(config.lanes(), &busy, &name(lane), 50.0);
        assert!(
            (told - rate).abs() < 1e-6,
            "status tells {lane} its lane's rate {rate}, not {told}"
        );
        predicted.push((place, position as f64 / rate * 1000.0));
    }
    assert_eq!(
        predicted
            .iter()
            .map(|p| p.1.round() as u64)
            .collect::<Vec<_>>(),
        [4000, 16000, 4000, 16000],
        "positions 60 and 240 of members at 15/s, 140 and 560 of general at 35/s"
    );
    let admitted = run(&store, &q, T0, 180).await?;
    for (place, eta_ms) in predicted {
        let (_, at) = admitted
            .iter()
            .find(|a| a.0 == place)
            .ok_or_else(|| anyhow::anyhow!("{place} admitted within 18 s"))?;
        let actual = (at - T0 + 100) as f64;
        assert!(
            (actual - eta_ms).abs() <= 0.1 * eta_ms,
            "place {place}: admitted after {actual} ms, ETA said {eta_ms} ms"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lane_places_keep_their_lane_through_away_leave_and_close() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = queue(&store, "keep", 10.0).await?;
    let m = join(&store, &q, Some(&name("members")), 3).await?;
    join(&store, &q, None, 5).await?;
    // An unknown lane takes no place.
    let e = store
        .join_in_lane(&q, 1, T0, &[None], &[], Some(&name("vip")))
        .await;
    assert!(
        matches!(e, Err(StoreError::NoSuchLane(ref l)) if l == "vip"),
        "{e:?}"
    );

    // Away and back: the place keeps its spot in its lane.
    assert_eq!(store.mark_away(&q, &[PlaceId(m[0])], 1, T0).await?, 1);
    match store.status(&q, PlaceId(m[1]), T0).await? {
        PlaceState::Waiting {
            position, waiting, ..
        } => assert_eq!((position, waiting), (2, 3), "the away place still counts"),
        other => anyhow::bail!("{other:?}"),
    }
    assert_eq!(store.mark_back(&q, &[PlaceId(m[0])], 1).await?, 1);
    match store.resume(&q, PlaceId(m[0]), 2, T0).await? {
        PlaceState::Waiting { position, lane, .. } => {
            assert_eq!((position, lane), (1, Some(name("members"))))
        }
        other => anyhow::bail!("{other:?}"),
    }
    assert_eq!(
        store.holder(&q, PlaceId(m[0])).await?,
        Some(2),
        "a takeover finds a lane's place and its new holder"
    );
    // Leave: the lane shrinks.
    store.leave(&q, PlaceId(m[2])).await?;
    let counts = store.lane_counts(&q).await?;
    assert_eq!(
        counts
            .iter()
            .map(|c| (c.name.as_str(), c.default, c.waiting))
            .collect::<Vec<_>>(),
        [("general", true, 5), ("members", false, 2)]
    );

    // Settings: a lane with places cannot be removed, nor made the default lane.
    let refused = store
        .put_lanes(&q, &lanes(&[("general", 100)], None))
        .await?;
    assert_eq!(
        refused,
        LanesWrite::NotEmpty {
            lane: "members".into(),
            places: 2
        }
    );
    let refused = store
        .put_lanes(
            &q,
            &lanes(&[("general", 70), ("members", 30)], Some("members")),
        )
        .await?;
    assert!(
        matches!(refused, LanesWrite::NotEmpty { .. }),
        "{refused:?}"
    );
    // Shares of kept lanes may change, and a new lane may be added.
    let w = store
        .put_lanes(
            &q,
            &lanes(&[("general", 50), ("members", 40), ("press", 10)], None),
        )
        .await?;
    assert_eq!(w, LanesWrite::Written);
    assert_eq!(
        store
            .queue_lanes(&q)
            .await?
            .lanes()
            .iter()
            .map(|l| l.share)
            .collect::<Vec<_>>(),
        [50, 40, 10]
    );

    // Closing drops every lane's places.
    store
        .close_queue(&q, usher_core::messages::CloseReason::QueueClosed)
        .await?;
    assert!(store.lane_counts(&q).await?.iter().all(|c| c.waiting == 0));
    let refused = store.put_lanes(&q, &Lanes::default()).await?;
    assert_eq!(refused, LanesWrite::Written, "empty lanes may go");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_admits_only_while_nobody_waits_in_any_lane() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("pass")?;
    store
        .put_queue(
            &q,
            &QueueConfig {
                admit_per_second: 1000.0,
                passthrough: true,
                max_active: Some(1),
                grace_seconds: 3600,
                session_ttl_seconds: 3600,
                ..QueueConfig::default()
            },
        )
        .await?;
    store
        .put_lanes(&q, &lanes(&[("general", 70), ("members", 30)], None))
        .await?;
    // Before the first tick there is no bucket: both wait. The tick admits one (one slot):
    // general, whose share is larger; the member waits, and the bucket keeps tokens.
    let g1 = join(&store, &q, None, 1).await?[0];
    let m1 = join(&store, &q, Some(&name("members")), 1).await?[0];
    let admitted = run(&store, &q, T0, 1).await?;
    assert_eq!(admitted.iter().map(|a| a.0).collect::<Vec<_>>(), [g1]);
    // The slot frees: a default-lane join finds its own lane empty, but a member waits.
    store.leave(&q, PlaceId(g1)).await?;
    let b = store
        .join_in_lane(&q, 1, T0 + 1, &[None], &[], None)
        .await?;
    let g2 = match b.outcome(0) {
        Ok(PlaceState::Waiting {
            place, position, ..
        }) => {
            assert_eq!(position, 1, "first in the default lane");
            place
        }
        other => anyhow::bail!("a join while a member waits must wait, got {other:?}"),
    };
    // Once nobody waits in any lane, the same join passes at once.
    store.leave(&q, g2).await?;
    store.leave(&q, PlaceId(m1)).await?;
    let b = store
        .join_in_lane(&q, 1, T0 + 2, &[None], &[], None)
        .await?;
    assert!(
        matches!(b.outcome(0), Ok(PlaceState::AdmittedNow { .. })),
        "{:?}",
        b.outcome(0)
    );
    Ok(())
}
