//! Browser binding in Redis (`bind: "browser_key"`), below the gateway: the join script records
//! each taken place's key in the same call, in batch order, skipping joins a proof-of-work
//! queue refused; proofs of possession are spent once.

use usher_core::binding::{Bind, Thumbprint};
use usher_core::challenge::{Challenge, Proof, Refusal};
use usher_core::ids::{PlaceId, QueueId};
use usher_core::store::{PlaceState, QueueConfig, Store};
use usher_core::time::now_ms;

fn key(c: char) -> Thumbprint {
    Thumbprint::parse(&c.to_string().repeat(Thumbprint::LEN)).expect("43 base64url characters")
}

fn place(s: Result<PlaceState, Refusal>) -> PlaceId {
    match s {
        Ok(PlaceState::Waiting { place, .. }) => place,
        other => panic!("a waiting place expected, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_batch_records_the_keys_of_the_places_it_takes() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("bound")?;
    store
        .put_queue(
            &q,
            &QueueConfig {
                paused: true,
                challenge: Challenge::Pow,
                pow_difficulty: 1,
                bind: Bind::BrowserKey,
                ..QueueConfig::default()
            },
        )
        .await?;
    let pow = |id: &str| {
        Some(Proof {
            id: id.into(),
            difficulty: 1,
            expires_ms: now_ms() + 60_000,
        })
    };
    // Three joins; the second brings no proof of work and takes no place.
    let batch = store
        .join_bound(
            &q,
            1,
            now_ms(),
            &[pow("a"), None, pow("c")],
            &[Some(key('A')), Some(key('B')), Some(key('C'))],
        )
        .await?;
    let (first, third) = (place(batch.outcome(0)), place(batch.outcome(2)));
    assert_eq!(batch.outcome(1), Err(Refusal::Missing));
    assert_eq!(
        third.0,
        first.0 + 1,
        "consecutive places for the accepted joins"
    );
    assert_eq!(
        store.place_keys(&q, &[first, third]).await?,
        [Some(key('A')), Some(key('C'))],
        "each place has its own join's key, none has the refused join's"
    );
    assert_eq!(store.place_key(&q, first).await?, Some(key('A')));

    // A join without a key (a queue that binds nothing) records none.
    let plain = store.join_bound(&q, 1, now_ms(), &[pow("d")], &[]).await?;
    assert_eq!(store.place_key(&q, place(plain.outcome(0))).await?, None);

    // A proof's jti is spent once, per queue.
    assert!(store.spend_proof(&q, "jti-1").await?);
    assert!(
        !store.spend_proof(&q, "jti-1").await?,
        "a replay is refused"
    );
    assert!(store.spend_proof(&QueueId::new("other")?, "jti-1").await?);
    Ok(())
}
