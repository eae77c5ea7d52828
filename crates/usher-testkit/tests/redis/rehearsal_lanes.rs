//! What rehearsing a sale with lanes found (`usher-rehearse --lane-shares`): a tick of a queue
//! whose default lane is not listed first counted the other lanes' places as the default
//! lane's, and its snapshot of a line longer than the exact window read past the lane's end
//! (`attempt to perform arithmetic on local 's2' (a nil value)`): the tick failed, and nobody
//! was admitted again until the line shrank.

use usher_core::ids::QueueId;
use usher_core::lanes::{Lane, LaneName, Lanes};
use usher_core::store::{PlaceState, QueueConfig, Store, Tick, JOIN_BATCH_MAX};
use usher_testkit::line::take_lease;
use usher_testkit::tick_args;

const T0: u64 = 1_000_000_000_000;

async fn join(store: &Store, q: &QueueId, lane: Option<&LaneName>, n: usize) -> anyhow::Result<()> {
    let b = store
        .join_in_lane(q, 1, T0, &vec![None; n.min(JOIN_BATCH_MAX)], &[], lane)
        .await?;
    for i in 0..n {
        anyhow::ensure!(
            matches!(b.outcome(i), Ok(PlaceState::Waiting { .. })),
            "join {i}: {:?}",
            b.outcome(i)
        );
    }
    Ok(())
}

/// Lanes `members` then `public`, the default `public`: 120 places in `public` and 30 in
/// `members`, exact positions 100. The tick snapshots each lane from its own places: it
/// succeeds, and the default lane's published samples end at its own 120th place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_lane_listed_second_is_snapshotted_from_its_own_places() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("lanes-order")?;
    store
        .put_queue(
            &q,
            &QueueConfig {
                admit_per_second: 1.0,
                ..QueueConfig::default()
            },
        )
        .await?;
    let lane = |n: &str, share| -> anyhow::Result<Lane> {
        Ok(Lane {
            name: LaneName::new(n)?,
            share,
        })
    };
    let lanes = Lanes::new(
        vec![lane("members", 50)?, lane("public", 50)?],
        Some(LaneName::new("public")?),
    )?;
    store.put_lanes(&q, &lanes).await?;
    join(&store, &q, None, 120).await?;
    join(&store, &q, Some(&LaneName::new("members")?), 30).await?;
    let lease = take_lease(&store, &q).await?;
    let mut args = tick_args(&lease, T0 + 1000);
    args.exact = 100;
    let Tick::Ticked(out) = store.tick(&q, &args).await? else {
        anyhow::bail!("the tick did not tick");
    };
    assert_eq!(out.waiting + out.admitted, 150, "{out:?}");
    let default = out
        .lanes
        .iter()
        .find(|l| l.name.as_str() == "public")
        .ok_or_else(|| anyhow::anyhow!("no public lane in {:?}", out.lanes))?;
    assert_eq!(default.waiting + default.admitted, 120, "{default:?}");
    Ok(())
}
