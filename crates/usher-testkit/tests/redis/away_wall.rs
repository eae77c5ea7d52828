//! A wall of away places cannot freeze the line (issue 23, finding 1): places whose browsers
//! disconnected wait in a set of their own (`parked`), so the tick never passes over them,
//! however many there are; they keep counting in positions and come back to their exact spot
//! when their browsers resume.

use serde_json::json;
use usher_core::ids::{PlaceId, QueueId};
use usher_core::store::{PlaceState, Store, JOIN_BATCH_MAX};
use usher_core::time::now_ms;
use usher_testkit::line::*;
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::wait::eventually;
use usher_testkit::SseClient;

/// More away places than a tick used to pass over (10,000).
const WALL: u64 = 10_300;

/// `n` places for browsers of gateway `gw`, taken in Redis through the join script (as a
/// gateway would, without streams), in line order.
async fn take_places(store: &Store, q: &QueueId, gw: u16, n: u64) -> anyhow::Result<Vec<PlaceId>> {
    let mut places = Vec::new();
    while (places.len() as u64) < n {
        let k = (n - places.len() as u64).min(JOIN_BATCH_MAX as u64) as usize;
        let joined = store.join_many(q, gw, now_ms(), k).await?;
        for i in 0..k {
            match joined.state(i) {
                PlaceState::Waiting { place, .. } => places.push(place),
                other => anyhow::bail!("join: {other:?}"),
            }
        }
    }
    Ok(places)
}

/// The attack of finding 1: 10,300 places joined and disconnected ahead of a real browser.
/// That browser, connected through a gateway, sees the away places counted in its position
/// and is admitted at the next tick once admission runs, with a token a booking service
/// accepts; the away places are neither admitted nor dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_behind_a_wall_of_away_places_is_admitted_at_the_next_tick() -> anyhow::Result<()>
{
    let stack = Stack::start(StackOptions::default()).await?;
    stack
        .put_queue(
            "wall",
            json!({"admit_per_second": 100.0, "paused": true, "grace_seconds": 3600}),
        )
        .await?;
    let q = QueueId::new("wall")?;
    let store = Store::connect(&stack.redis.url()).await?;
    // The wall: places of a gateway (index 9) whose browsers all disconnected.
    let wall = take_places(&store, &q, 9, WALL).await?;
    assert_eq!(store.mark_away(&q, &wall, 9, now_ms()).await?, WALL);

    let client = SseClient::new(stack.gateway_url(0));
    let (_ticket, position, w) = join_watch(&client, "wall").await?;
    assert_eq!(
        position,
        WALL + 1,
        "the away places ahead count in its position"
    );

    let probe = usher_testkit::RedisProbe::connect(&stack.redis.url()).await?;
    stack.put_queue("wall", json!({"paused": false})).await?;
    // At 100 a second and a tick of 100 ms, every tick has a token for it: the first
    // tick after the pause ended admits it (two ticks leave room for the one under way,
    // which may have read the queue still paused).
    probe.ticks(&q, 2).await?;
    let (_, admitted) = probe.last_tick(&q).await?;
    assert_eq!(admitted, 1, "admitted within two ticks of the pause's end");
    // Its gateway tells it.
    eventually("the admitted event", async || w.last("admitted")).await?;
    let e = w.last("admitted").expect("seen above");
    let token = data(&e)["token"].as_str().unwrap_or_default().to_owned();
    verify_token(&jwks(&stack).await?, &token, "wall")?;

    let view = stack.queue("wall").await?;
    assert_eq!(
        (
            view["waiting"].as_u64(),
            view["away"].as_u64(),
            view["admitted_total"].as_u64(),
            view["dropped_total"].as_u64()
        ),
        (Some(WALL), Some(WALL), Some(1), Some(0)),
        "the away places still wait, neither admitted nor dropped: {view}"
    );
    Ok(())
}

/// A line of 30,000 places: a wall of 2,000 away places at the head, then present, away and
/// left places mixed. Positions count the away places: a snapshot gives every present place
/// its position exactly within the first 1,000 and within 1% beyond (read the way a gateway
/// reads it), and `status` and `resume` answer exact positions. A place that comes back takes
/// its old spot, so nobody behind it moves back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn away_places_count_in_positions_exactly_to_1000_and_within_1_percent_beyond(
) -> anyhow::Result<()> {
    use rand::{Rng, SeedableRng};
    use usher_gateway::position::{Standing, Standings};

    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("count")?;
    store
        .put_queue(
            &q,
            &usher_core::store::QueueConfig {
                admit_per_second: PAUSED,
                grace_seconds: 600,
                ..Default::default()
            },
        )
        .await?;
    const N: usize = 30_000;
    const HEAD_WALL: usize = 2_000;
    let places = take_places(&store, &q, 7, N as u64).await?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(23);
    // 0: present, 1: away, 2: left.
    let fate: Vec<u8> = (0..N)
        .map(|i| match i {
            _ if i < HEAD_WALL => 1,
            _ if rng.gen_bool(0.1) => 2,
            _ if rng.gen_bool(0.4) => 1,
            _ => 0,
        })
        .collect();
    let of = |f: u8| -> Vec<PlaceId> {
        places
            .iter()
            .zip(&fate)
            .filter(|(_, x)| **x == f)
            .map(|(p, _)| *p)
            .collect()
    };
    for p in of(2) {
        store.leave(&q, p).await?;
    }
    let away = of(1);
    assert_eq!(
        store.mark_away(&q, &away, 7, now_ms()).await?,
        away.len() as u64
    );
    // The truth: the line's places in order (present and away), 1-based.
    let line: Vec<PlaceId> = places
        .iter()
        .zip(&fate)
        .filter(|(_, x)| **x != 2)
        .map(|(p, _)| *p)
        .collect();
    let rank: std::collections::HashMap<u64, u64> = line
        .iter()
        .enumerate()
        .map(|(i, p)| (p.0, i as u64 + 1))
        .collect();
    let truth = |p: PlaceId| rank.get(&p.0).copied();

    let lease = take_lease(&store, &q).await?;
    let calls =
        usher_testkit::tick_calls(&store, &q, &usher_testkit::tick_args(&lease, now_ms())).await?;
    let Some(usher_core::store::Tick::Ticked(o)) = calls.last() else {
        anyhow::bail!("the tick: {calls:?}")
    };
    assert_eq!(o.admitted, 0, "a paused rate");
    assert_eq!(
        o.waiting,
        line.len() as u64,
        "away places count in `waiting`"
    );
    let snapshot = usher_core::messages::QueueState {
        waiting: o.waiting,
        runs: o.runs.clone(),
        samples: o.samples.clone(),
        last_place: o.last_place,
        ..usher_core::messages::QueueState::empty(q.clone())
    };
    assert!(o.samples.len() < 1_000, "{} samples", o.samples.len());
    let mut worst = 0.0f64;
    for p in of(0) {
        let want = truth(p).expect("in line");
        let Standing::At(got) = snapshot.standing(p.0) else {
            panic!("place {p:?} at {want} not found in the snapshot")
        };
        if want <= 1_000 {
            assert_eq!(got, want, "exact within the first 1,000");
        }
        worst = worst.max((got as f64 - want as f64).abs() / want as f64);
    }
    assert!(worst <= 0.01, "worst relative error {worst}");

    // `status` is exact for present and away places alike.
    for (i, p) in line.iter().enumerate().step_by(97) {
        match store.status(&q, *p, now_ms()).await? {
            PlaceState::Waiting {
                position, waiting, ..
            } => assert_eq!((position, waiting), (i as u64 + 1, line.len() as u64)),
            other => panic!("place {p:?}: {other:?}"),
        }
    }
    // An away place deep in line comes back (through another gateway) to its exact spot; the
    // present place right behind it keeps its position.
    let back = away[away.len() / 2];
    let present = of(0);
    let behind = *present
        .iter()
        .find(|p| p.0 > back.0)
        .expect("a present place behind it");
    let before = store.status(&q, behind, now_ms()).await?;
    match store.resume(&q, back, 8, now_ms()).await? {
        PlaceState::Waiting {
            position,
            previous_gateway,
            ..
        } => assert_eq!((Some(position), previous_gateway), (truth(back), Some(7))),
        other => panic!("resume: {other:?}"),
    }
    assert_eq!(store.status(&q, behind, now_ms()).await?, before);
    Ok(())
}

/// Upgrades: a queue written by the version before `parked` keeps working. There, away places
/// stayed in `waiting` with an `away` entry, and meta held a tick's `scan` cursor. The new
/// tick moves those away places aside as they reach the head (each once), admits the present
/// places behind 10,300 of them in the first tick, drops those whose grace ended, counts them
/// all in positions, and a browser among them that comes back is admitted at its turn. A
/// parked place left without its `away` entry (an old dispatcher expired it during a rolling
/// upgrade) is dropped rather than counted forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn away_places_of_the_previous_layout_no_longer_hold_the_line() -> anyhow::Result<()> {
    use usher_core::keys::QueueKeys;
    use usher_core::store::Tick;

    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("old")?;
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
    const PRESENT: u64 = 5;
    const EXPIRED: usize = 100;
    let places = take_places(&store, &q, 7, WALL + PRESENT).await?;
    let k = QueueKeys::new(&q);
    let mut conn = redis::Client::open(redis.url())?
        .get_multiplexed_async_connection()
        .await?;
    // The previous version's away places: still in `waiting`, each with an `away` entry; the
    // last 100 of them past their grace period. And its tick's cursor.
    let now = now_ms();
    let wall = &places[..WALL as usize];
    for (i, chunk) in wall.chunks(1000).enumerate() {
        let mut cmd = redis::cmd("ZADD");
        cmd.arg(&k.away);
        for (j, p) in chunk.iter().enumerate() {
            let expired = i * 1000 + j >= WALL as usize - EXPIRED;
            cmd.arg(if expired { now - 1 } else { now + 600_000 })
                .arg(p.0);
        }
        let _: () = cmd.query_async(&mut conn).await?;
    }
    let _: () = redis::cmd("HSET")
        .arg(&k.meta)
        .arg("scan")
        .arg(format!("{now}|{}|10000", wall[9_999].0))
        .query_async(&mut conn)
        .await?;
    // Positions count the old away places as before.
    match store.status(&q, places[WALL as usize], now_ms()).await? {
        PlaceState::Waiting {
            position, waiting, ..
        } => assert_eq!((position, waiting), (WALL + 1, WALL + PRESENT)),
        other => panic!("status: {other:?}"),
    }

    // The first tick (budgeted for 100 ms at 1,000 a second: 100 places).
    let lease = take_lease(&store, &q).await?;
    let calls =
        usher_testkit::tick_calls(&store, &q, &usher_testkit::tick_args(&lease, now_ms())).await?;
    let (mut admitted, mut dropped) = (0, 0);
    for c in &calls {
        let Tick::Ticked(o) = c else {
            anyhow::bail!("tick: {c:?}")
        };
        admitted += o.admitted;
        dropped += o.dropped;
    }
    assert_eq!(
        (admitted, dropped),
        (PRESENT, EXPIRED as u64),
        "the present places are admitted in the first tick: {calls:?}"
    );
    assert!(calls.len() <= 12, "{} calls", calls.len());
    for p in &places[WALL as usize..] {
        let s = store.status(&q, *p, now_ms()).await?;
        assert!(matches!(s, PlaceState::AdmissionPending), "{p:?}: {s:?}");
    }
    let stats = store.queue_stats(&q, now_ms()).await?;
    let left = WALL - EXPIRED as u64;
    assert_eq!(
        (stats.waiting, stats.away),
        (left, left),
        "the away places still wait: {stats:?}"
    );
    let scan: Option<String> = redis::cmd("HGET")
        .arg(&k.meta)
        .arg("scan")
        .query_async(&mut conn)
        .await?;
    assert_eq!(scan, None, "the old cursor is gone");

    // An old away place comes back: at its exact spot, and admitted at its turn.
    let back = wall[5_000];
    match store.resume(&q, back, 7, now_ms()).await? {
        PlaceState::Waiting { position, .. } => assert_eq!(position, 5_001),
        other => panic!("resume: {other:?}"),
    }
    let t = usher_testkit::tick_once(&store, &q, &lease).await?;
    assert!(matches!(&t, Tick::Ticked(o) if o.admitted == 1), "{t:?}");
    assert!(matches!(
        store.status(&q, back, now_ms()).await?,
        PlaceState::AdmissionPending
    ));

    // A parked place whose `away` entry is gone is dropped, not counted forever.
    let _: () = redis::cmd("ZREM")
        .arg(&k.away)
        .arg(wall[0].0)
        .query_async(&mut conn)
        .await?;
    let t = usher_testkit::tick_once(&store, &q, &lease).await?;
    assert!(matches!(&t, Tick::Ticked(o) if o.dropped == 1), "{t:?}");
    assert_eq!(store.status(&q, wall[0], now_ms()).await?, PlaceState::Gone);
    assert_eq!(store.queue_stats(&q, now_ms()).await?.waiting, left - 2);
    Ok(())
}
