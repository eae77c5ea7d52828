//! Nobody is stranded: a browser whose admission (or whose place's end) never reached its
//! gateway's stream still learns of it from the next snapshot.
//!
//! The tests play the dispatcher themselves (no dispatcher runs): they admit places in Redis
//! and remove one without telling the gateway, then publish a `state` snapshot that no longer
//! lists them (down to an empty line). The gateway must ask Redis what became of each place it holds and tell the
//! browser: `admitted` with the stored token, or `closed` when the place is gone.

use usher_core::ids::PlaceId;
use usher_core::messages::{QueueState, StreamMessage};
use usher_core::store::{Tick, TokenRecord};
use usher_core::time::now_ms;
use usher_testkit::line::*;
use usher_testkit::wait::eventually;
use usher_testkit::{tick_once, SseClient};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_without_a_held_place_makes_the_gateway_ask_redis() -> anyhow::Result<()> {
    // 20/s and a first tick budgeted for 100 ms: the tick below admits the first two places.
    let (_redis, store, gw, q, id) = one_gateway("strand", 20.0).await?;
    let client = SseClient::new(gw.url());
    let (t1, _, c1) = join_watch(&client, "strand").await?;
    let (t2, _, c2) = join_watch(&client, "strand").await?;
    let (t3, _, c3) = join_watch(&client, "strand").await?;
    let (t4, _, c4) = join_watch(&client, "strand").await?;

    // Places 1 and 2 are admitted and their tokens stored, but no `admitted` message is sent.
    let lease = take_lease(&store, &q).await?;
    tick_once(&store, &q, &lease).await?;
    let at = now_ms();
    let records: Vec<_> = [(&t1, "stored-token-1"), (&t2, "stored-token-2")]
        .iter()
        .map(|(t, token)| {
            (
                PlaceId(place_of(t)),
                TokenRecord {
                    admitted_at_ms: at,
                    expires_at_ms: at + 600_000,
                    token: (*token).into(),
                },
            )
        })
        .collect();
    store.store_tokens(&q, &lease, &records).await?;
    // Place 3 leaves the line in Redis, and its gateway is not told either.
    store.leave(&q, PlaceId(place_of(&t3))).await?;
    for w in [&c1, &c2, &c3] {
        assert!(w.last("admitted").is_none() && w.last("closed").is_none());
    }

    // The next snapshot lists only place 4: places 1 to 3 are no longer in the line.
    let p4 = place_of(&t4);
    store
        .send(&[(
            id,
            vec![StreamMessage::State(QueueState {
                queue: q.clone(),
                at_ms: now_ms(),
                waiting: 1,
                rate: 20.0,
                runs: vec![(p4, 1)],
                samples: vec![(p4, 1)],
                last_place: p4,
                inventory: None,
                lanes: Vec::new(),
                door: None,
            })],
        )])
        .await?;
    for (w, token) in [(&c1, "stored-token-1"), (&c2, "stored-token-2")] {
        eventually("the browser admitted", async || {
            if w.last("admitted").is_some() {
                Ok(())
            } else {
                Err(format!(
                    "the browser holding {token} learns of its admission"
                ))
            }
        })
        .await?;
        let e = w
            .last("admitted")
            .ok_or_else(|| anyhow::anyhow!("admitted"))?;
        assert_eq!(data(&e)["token"], token);
    }
    eventually("the browser whose place is gone is told so", async || {
        c3.last("closed").is_some()
    })
    .await?;
    let closed = c3.last("closed").ok_or_else(|| anyhow::anyhow!("closed"))?;
    assert_eq!(data(&closed)["reason"], "place_lost");
    eventually("the browser still waiting moves to the front", async || {
        position(&c4) == Some(1)
    })
    .await?;
    assert!(c4.last("admitted").is_none() && c4.last("closed").is_none());
    gw.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_waiter_hears_of_its_admission_from_an_empty_line() -> anyhow::Result<()> {
    let (_redis, store, gw, q, id) = one_gateway("empty", 20.0).await?;
    let client = SseClient::new(gw.url());
    let (t1, _, c1) = join_watch(&client, "empty").await?;

    // The only waiter is admitted; its `admitted` message never reaches the gateway.
    let lease = take_lease(&store, &q).await?;
    let Tick::Ticked(out) = tick_once(&store, &q, &lease).await? else {
        anyhow::bail!("the tick ran");
    };
    assert_eq!((out.admitted, out.waiting), (1, 0));
    assert!(
        out.runs.is_empty() && out.samples.is_empty(),
        "the line is empty"
    );
    assert_eq!(
        out.last_place,
        place_of(&t1),
        "the snapshot says how far places go"
    );
    let at = now_ms();
    let record = TokenRecord {
        admitted_at_ms: at,
        expires_at_ms: at + 600_000,
        token: "stored-token-1".into(),
    };
    store
        .store_tokens(&q, &lease, &[(PlaceId(place_of(&t1)), record)])
        .await?;

    // The snapshot of that tick, as the dispatcher publishes it: an empty line.
    store
        .send(&[(
            id,
            vec![StreamMessage::State(QueueState {
                queue: q.clone(),
                at_ms: at,
                waiting: out.waiting,
                rate: 20.0,
                runs: out.runs,
                samples: out.samples,
                last_place: out.last_place,
                inventory: None,
                lanes: Vec::new(),
                door: None,
            })],
        )])
        .await?;
    eventually(
        "an empty line still tells the gateway its browser is no longer waiting",
        async || c1.last("admitted").is_some(),
    )
    .await?;
    let e = c1
        .last("admitted")
        .ok_or_else(|| anyhow::anyhow!("admitted"))?;
    assert_eq!(data(&e)["token"], "stored-token-1");
    gw.stop().await
}
