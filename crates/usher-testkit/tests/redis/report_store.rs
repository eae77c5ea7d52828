//! The fairness record at the store (issue 25, part 2), on a real Redis with a synthetic
//! clock: every script call is given its `now`, so a sale of a few minutes runs as fast as
//! Redis answers. What a recording queue keeps of each place, and that a queue that does not
//! record writes nothing.

use usher_core::ids::{PlaceId, QueueId};
use usher_core::keys::QueueKeys;
use usher_core::messages::CloseReason;
use usher_core::record::{Entry, JoinNote, Kind, LeaveReason, NetworkHash, Outcome, RECORD_WIDTH};
use usher_core::store::{PlaceState, QueueConfig, Store, Tick};
use usher_core::time::now_ms;
use usher_testkit::line::take_lease;
use usher_testkit::{tick_args, tick_calls};

/// A queue admitting 10 a second, with `record` as given and a 1 s grace period.
pub(crate) fn config(record: bool) -> QueueConfig {
    QueueConfig {
        admit_per_second: 10.0,
        grace_seconds: 1,
        session_ttl_seconds: 60,
        passthrough: false,
        record,
        record_retention_seconds: 7200,
        ..QueueConfig::default()
    }
}

/// Creates queue `id` with [`config`].
async fn queue(store: &Store, id: &str, record: bool) -> anyhow::Result<QueueId> {
    let q = QueueId::new(id)?;
    store.put_queue(&q, &config(record)).await?;
    Ok(q)
}

/// Joins `n` places at `now`, 1 ms apart and one per call: their ids. With `networks`, join
/// `i` comes from network 192.0.(i mod 3).0/24; without, from none.
pub(crate) async fn join_places(
    store: &Store,
    q: &QueueId,
    now: u64,
    n: usize,
    networks: bool,
) -> anyhow::Result<Vec<PlaceId>> {
    let mut ids = Vec::new();
    for i in 0..n {
        let network = if networks {
            let ip = format!("192.0.{}.7", i % 3).parse()?;
            Some(NetworkHash::of(b"test key", q, ip))
        } else {
            None
        };
        let note = JoinNote {
            network,
            issue_to_join_ms: None,
        };
        let b = store
            .join_recorded(q, 1, now + i as u64, &[None], &[], None, &[note])
            .await?;
        match b.outcome(0) {
            Ok(PlaceState::Waiting { place, .. }) => ids.push(place),
            other => anyhow::bail!("join {i}: {other:?}"),
        }
    }
    Ok(ids)
}

/// Joins `n` places from three networks (see [`join_places`]).
async fn join(store: &Store, q: &QueueId, now: u64, n: usize) -> anyhow::Result<Vec<PlaceId>> {
    join_places(store, q, now, n, true).await
}

/// Ticks every 100 ms from `from` for `ticks` ticks: the places admitted, in order.
async fn run(store: &Store, q: &QueueId, from: u64, ticks: u64) -> anyhow::Result<Vec<u64>> {
    let lease = take_lease(store, q).await?;
    let mut admitted = Vec::new();
    for i in 0..ticks {
        for t in tick_calls(store, q, &tick_args(&lease, from + i * 100)).await? {
            let Tick::Ticked(o) = t else {
                anyhow::bail!("tick {i}: {t:?}")
            };
            admitted.extend(o.fresh.iter().map(|e| e.place.0));
        }
    }
    Ok(admitted)
}

pub(crate) async fn raw(url: &str) -> anyhow::Result<redis::aio::MultiplexedConnection> {
    Ok(redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?)
}

/// The entries of `q`'s record, in place order.
pub(crate) async fn entries(url: &str, q: &QueueId) -> anyhow::Result<Vec<Entry>> {
    let bytes: Vec<u8> = redis::cmd("GET")
        .arg(QueueKeys::new(q).record)
        .query_async(&mut raw(url).await?)
        .await?;
    Ok(bytes
        .chunks(RECORD_WIDTH)
        .enumerate()
        .filter_map(|(i, c)| Entry::decode(i as u32, c))
        .collect())
}

/// The milliseconds `q`'s record has left to live (`-1`: no expiry, `-2`: none).
pub(crate) async fn pttl(url: &str, q: &QueueId) -> anyhow::Result<i64> {
    Ok(redis::cmd("PTTL")
        .arg(QueueKeys::new(q).record)
        .query_async(&mut raw(url).await?)
        .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_queue_keeps_each_place() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = queue(&store, "recorded", true).await?;
    // `leave` reads the real clock: the sale starts now.
    let t0 = now_ms();
    let places = join(&store, &q, t0, 30).await?;
    // The third leaves; the fifth goes away and stays away past its 1 s grace.
    store.leave(&q, places[2]).await?;
    store.mark_away(&q, &[places[4]], 1, t0 + 600).await?;
    let admitted = run(&store, &q, t0 + 1000, 40).await?;
    assert_eq!(admitted.len(), 28, "every place but the two");
    // Sessions: the first booked, the second released, the rest expire (TTL 60 s).
    store.consume_session(&q, places[0], t0 + 5000).await?;
    store.end_session(&q, places[1], t0 + 5000).await?;
    run(&store, &q, t0 + 70_000, 1).await?;

    let e = entries(&redis.url(), &q).await?;
    assert_eq!(e.len(), 30, "one entry a place");
    assert!(e.iter().all(|x| x.kind == Kind::Joined && x.lane == 0));
    // Joined 1 ms apart; positions 1..=30 at 10/s: ETAs of 1 s (1..=10) to 3 s.
    assert_eq!(e[0].joined_ms, 0);
    assert_eq!(e[29].joined_ms, 29);
    assert_eq!(e[0].eta_seconds, Some(1));
    assert_eq!(e[29].eta_seconds, Some(3));
    assert_eq!(e[2].left, Some(LeaveReason::Left));
    assert_eq!(
        (e[4].left, e[4].went_away),
        (Some(LeaveReason::AwayExpired), true)
    );
    assert!(e[4].admission.is_none() && e[2].admission.is_none());
    // Admission ordinals follow arrival, skipping the two.
    let ords: Vec<u32> = e.iter().filter_map(|x| x.admission).collect();
    assert_eq!(ords, (1..=28).collect::<Vec<u32>>());
    assert!(e[0].admitted_ms.is_some_and(|a| a >= 1000));
    assert_eq!(e[0].outcome, Some(Outcome::Booked));
    assert_eq!(e[1].outcome, Some(Outcome::Released));
    assert_eq!(e[3].outcome, Some(Outcome::Expired));
    assert_eq!(e[0].network, e[3].network, "192.0.0.0/24 twice");
    assert_ne!(e[0].network, e[1].network);

    let r = store.fairness_report(&q).await?.expect("a queue");
    assert!(r.recorded);
    let o = r.order.expect("order");
    assert_eq!((o.admitted, o.stayed_connected, o.inversions), (28, 28, 0));
    assert_eq!(o.kendall_tau, Some(1.0));
    let s = r.sessions.expect("sessions");
    assert_eq!(
        (s.booked, s.released, s.expired, s.no_show, s.open),
        (1, 1, 26, 0, 0)
    );
    let ab = r.abandonment.expect("abandonment");
    assert_eq!((ab[0].left, ab[0].away_expired), (1, 1));
    let n = &r.networks.expect("networks")[0];
    assert_eq!((n.admissions, n.distinct_networks), (28, 3));

    // Closed: the record is kept for the retention, then goes.
    store.close_queue(&q, CloseReason::QueueClosed).await?;
    let ttl = pttl(&redis.url(), &q).await?;
    assert!((7_100_000..=7_200_000).contains(&ttl), "PTTL {ttl}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_that_does_not_record_writes_nothing() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = queue(&store, "unrecorded", false).await?;
    let t0 = now_ms();
    let places = join(&store, &q, t0, 5).await?;
    store.leave(&q, places[1]).await?;
    store.mark_away(&q, &[places[2]], 1, t0 + 100).await?;
    run(&store, &q, t0 + 1000, 20).await?;
    store.consume_session(&q, places[0], t0 + 3000).await?;
    store.close_queue(&q, CloseReason::QueueClosed).await?;
    let mut conn = raw(&redis.url()).await?;
    let k = QueueKeys::new(&q);
    let exists: u64 = redis::cmd("EXISTS")
        .arg(&k.record)
        .query_async(&mut conn)
        .await?;
    assert_eq!(exists, 0, "no record");
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(&k.meta)
        .query_async(&mut conn)
        .await?;
    let extra: Vec<&String> = fields
        .iter()
        .filter(|f| f.starts_with("record_") && *f != "record_retention_seconds")
        .collect();
    assert!(extra.is_empty(), "no record fields in meta: {extra:?}");
    let r = store.fairness_report(&q).await?.expect("a queue");
    assert!(!r.recorded);
    assert!(r.order.is_none());
    assert!(store
        .fairness_report(&QueueId::new("never")?)
        .await?
        .is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_queue_keeps_each_proof_of_work() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("pow-recorded")?;
    let cfg = QueueConfig {
        challenge: usher_core::challenge::Challenge::Pow,
        pow_difficulty: 12,
        passthrough: false,
        record: true,
        ..QueueConfig::default()
    };
    store.put_queue(&q, &cfg).await?;
    let t0 = now_ms();
    // One batch of four joins: the third's proof is too easy and takes no place.
    let proof = |id: &str, difficulty: u8| {
        Some(usher_core::challenge::Proof {
            id: id.to_owned(),
            difficulty,
            expires_ms: t0 + 60_000,
        })
    };
    let solve = |ms: u64| JoinNote {
        network: None,
        issue_to_join_ms: Some(ms),
    };
    let b = store
        .join_recorded(
            &q,
            1,
            t0,
            &[
                proof("a", 12),
                proof("b", 14),
                proof("c", 3),
                proof("d", 12),
            ],
            &[],
            None,
            &[solve(1500), solve(2500), solve(100), solve(40_000)],
        )
        .await?;
    assert!(b.outcome(2).is_err(), "the easy proof took no place");
    let e = entries(&redis.url(), &q).await?;
    let got: Vec<(u8, Option<u32>)> = e
        .iter()
        .map(|x| (x.pow_difficulty, x.issue_to_join_ms))
        .collect();
    assert_eq!(
        got,
        vec![(12, Some(1500)), (14, Some(2500)), (12, Some(40_000))],
        "the accepted joins' proofs, in batch order"
    );
    let r = store.fairness_report(&q).await?.expect("a queue");
    let p = r.proof_of_work.expect("proof of work");
    assert_eq!(p.joins, 3);
    assert_eq!(p.difficulty.get(&12), Some(&2));
    assert_eq!(p.issue_to_join_p50_seconds, Some(2.5));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_queue_keeps_each_no_show() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("no-shows")?;
    let cfg = QueueConfig {
        admit_per_second: 10.0,
        session_ttl_seconds: 60,
        arrival_seconds: Some(10),
        passthrough: false,
        record: true,
        ..QueueConfig::default()
    };
    store.put_queue(&q, &cfg).await?;
    let t0 = now_ms();
    let places = join(&store, &q, t0, 3).await?;
    assert_eq!(run(&store, &q, t0 + 1000, 5).await?.len(), 3);
    // The first arrives (and books); the others never do: no-shows at admission + 10 s.
    store.consume_session(&q, places[0], t0 + 2000).await?;
    run(&store, &q, t0 + 20_000, 1).await?;
    let e = entries(&redis.url(), &q).await?;
    let outcomes: Vec<Option<Outcome>> = e.iter().map(|x| x.outcome).collect();
    assert_eq!(
        outcomes,
        vec![
            Some(Outcome::Booked),
            Some(Outcome::NoShow),
            Some(Outcome::NoShow)
        ]
    );
    let s = store
        .fairness_report(&q)
        .await?
        .and_then(|r| r.sessions)
        .expect("sessions");
    assert_eq!((s.booked, s.no_show, s.open), (1, 2, 0));
    Ok(())
}
