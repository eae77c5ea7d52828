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
    assert_eq!(position, WALL + 1, "the away places ahead count in its position");

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
