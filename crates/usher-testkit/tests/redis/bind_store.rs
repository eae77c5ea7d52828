//! Browser binding in Redis (`bind: "browser_key"`), below the gateway: the join script records
//! each taken place's key in the same call, in batch order, skipping joins a proof-of-work
//! queue refused; proofs of possession are spent once.

use std::time::Duration;

use usher_core::binding::{Bind, Thumbprint};
use usher_core::challenge::{Challenge, Proof, Refusal};
use usher_core::draw::{EntrantHash, Seed};
use usher_core::ids::{PlaceId, QueueId};
use usher_core::keys::QueueKeys;
use usher_core::store::{
    DrawOutcome, DrawPrep, Joined, LeaveOutcome, PlaceState, QueueConfig, Store, TicketKey,
};
use usher_core::time::now_ms;
use usher_testkit::procs::Proc;
use usher_testkit::redis_server::redis_cli;
use usher_testkit::wait::eventually;

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

    // A proof's jti is spent once, per queue and per key: one client cannot spend the ids
    // another key's code might pick.
    assert!(store.spend_proof(&q, &key('A'), "jti-1").await?);
    assert!(
        !store.spend_proof(&q, &key('A'), "jti-1").await?,
        "a replay is refused"
    );
    assert!(store.spend_proof(&q, &key('B'), "jti-1").await?);
    assert!(
        store
            .spend_proof(&QueueId::new("other")?, &key('A'), "jti-1")
            .await?
    );
    Ok(())
}

/// A scheduled sale's draw gives every pre-queue place a new id in line; its browser key
/// moves with it, in the same call, so the dispatcher (which mints by the new id) puts it in
/// the token as `cnf.jkt`, and the gateway still finds it from the ticket's pre-queue id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drawn_place_keeps_its_browser_key() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("bound-sale")?;
    store
        .put_queue(
            &q,
            &QueueConfig {
                bind: Bind::BrowserKey,
                ..QueueConfig::default()
            },
        )
        .await?;
    let seed = Seed::generate();
    store
        .schedule(&q, Some(now_ms() + 3_600_000), &seed)
        .await?;
    let keys: Vec<_> = "ABCD".chars().map(|c| Some(key(c))).collect();
    let batch = store
        .join_bound(&q, 0, now_ms(), &[None, None, None, None], &keys)
        .await?;
    let Some(Joined::Scheduled { last, count, .. }) = batch.joined else {
        anyhow::bail!("joins did not go to the pre-queue: {batch:?}");
    };
    let pre: Vec<PlaceId> = (last + 1 - count..=last).map(PlaceId).collect();
    let entrants: Vec<_> = pre
        .iter()
        .map(|p| (*p, EntrantHash::of_ticket(&format!("bound-sale.{}.t", p.0))))
        .collect();
    store.record_entrants(&q, &entrants).await?;
    assert!(store.schedule(&q, Some(now_ms()), &seed).await?);
    let lease = store
        .acquire_lease(&q, "replica-a", Duration::from_secs(60))
        .await?
        .ok_or_else(|| anyhow::anyhow!("no lease"))?;
    let DrawPrep::Ready(due) = store.prepare_draw(&q, &lease, 60_000, now_ms()).await? else {
        anyhow::bail!("the draw is not ready");
    };
    let recorded = due.recorded;
    let order = due.order();
    let outcome = store
        .run_draw(
            &q,
            &lease,
            60_000,
            now_ms(),
            recorded,
            &order.entrants,
            order.absent,
        )
        .await?;
    assert!(
        matches!(outcome, DrawOutcome::Done { drawn: 4, .. }),
        "{outcome:?}"
    );
    let k = QueueKeys::new(&q);
    let mut drawn = Vec::new();
    for p in &pre {
        let id = redis_cli(redis.port(), &["HGET", &k.drawn, &p.0.to_string()])?;
        let id = PlaceId(id.trim().parse()?);
        assert_ne!(id, *p, "the draw gave the place a new id");
        drawn.push(id);
    }
    // What the dispatcher reads when it mints the drawn places' tokens (`cnf.jkt`).
    assert_eq!(
        store.place_keys(&q, &drawn).await?,
        keys,
        "each drawn place has its own key under its new id"
    );
    for (p, want) in pre.iter().zip(&keys) {
        let want = want.clone().expect("a key");
        assert_eq!(
            store.ticket_key(&q, *p).await?,
            TicketKey::Bound(want),
            "the gateway finds the key from the ticket's pre-queue id"
        );
    }
    assert_eq!(
        redis_cli(redis.port(), &["HLEN", &k.bound])?.trim(),
        "4",
        "moved, not copied: one entry per place"
    );
    Ok(())
}

/// The number of browser keys `bound` holds for `q`.
fn bound_len(redis: &usher_testkit::RedisServer, q: &QueueId) -> anyhow::Result<u64> {
    let k = QueueKeys::new(q);
    Ok(redis_cli(redis.port(), &["HLEN", &k.bound])?
        .trim()
        .parse()?)
}

/// `bound` is pruned: the dispatcher driving a queue forgets the key of each place over for
/// good (left, dropped, its session ended, its queue closed) and keeps the keys of live places
/// (waiting, admitted with a valid session), which resumes and the mint need. The gateway
/// hears an over place is over, so its browser is told what happened (not `wrong_key`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_places_over_for_good_are_pruned() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let (q, closing) = (QueueId::new("bound-prune")?, QueueId::new("bound-close")?);
    let paused = QueueConfig {
        bind: Bind::BrowserKey,
        paused: true,
        admit_per_second: 1000.0,
        ..QueueConfig::default()
    };
    store.put_queue(&q, &paused).await?;
    store.put_queue(&closing, &paused).await?;
    let join = async |q: &QueueId, keys: &str| -> anyhow::Result<Vec<PlaceId>> {
        let keys: Vec<_> = keys.chars().map(|c| Some(key(c))).collect();
        let batch = store
            .join_bound(q, 0, now_ms(), &vec![None; keys.len()], &keys)
            .await?;
        Ok((0..keys.len()).map(|i| place(batch.outcome(i))).collect())
    };
    let places = join(&q, "ABCDEFG").await?;
    let doomed = join(&closing, "XYZ").await?;
    assert_eq!(
        (bound_len(&redis, &q)?, bound_len(&redis, &closing)?),
        (7, 3)
    );

    let _dispatcher = Proc::start(
        "usher-dispatcher",
        &[
            ("USHER_REDIS_URL", redis.url()),
            ("USHER_TICK_MS", "100".into()),
        ],
    )
    .await?;
    // Two places leave the line, one is dropped (its browser went away an hour ago, past
    // its grace); a queue closes with three places in it.
    for p in &places[..2] {
        assert!(matches!(
            store.leave(&q, *p).await?,
            LeaveOutcome::Left { .. }
        ));
    }
    store
        .mark_away(&q, &places[6..], 0, now_ms() - 3_600_000)
        .await?;
    store
        .close_queue(&closing, usher_core::messages::CloseReason::SoldOut)
        .await?;
    eventually(
        "the keys of the places that left or were dropped are forgotten",
        async || bound_len(&redis, &q).ok() == Some(4),
    )
    .await?;
    assert_eq!(store.ticket_key(&q, places[0]).await?, TicketKey::Over);
    assert_eq!(store.ticket_key(&q, places[6]).await?, TicketKey::Over);
    eventually(
        "the keys of a closed queue's line are forgotten",
        async || bound_len(&redis, &closing).ok() == Some(0),
    )
    .await?;
    assert_eq!(
        store.ticket_key(&closing, doomed[0]).await?,
        TicketKey::Over
    );

    // The other four are admitted: their keys stay while their sessions are valid.
    store
        .put_queue(
            &q,
            &QueueConfig {
                paused: false,
                ..paused.clone()
            },
        )
        .await?;
    let k = QueueKeys::new(&q);
    eventually("four places admitted", async || {
        redis_cli(redis.port(), &["HLEN", &k.tokens]).is_ok_and(|n| n.trim() == "4")
    })
    .await?;
    assert_eq!(
        store.prune_bound(&q).await?,
        0,
        "no live place's key is forgotten"
    );
    assert_eq!(bound_len(&redis, &q)?, 4);
    assert_eq!(
        store.ticket_key(&q, places[2]).await?,
        TicketKey::Bound(key('C'))
    );
    // One session ends (its browser gives it up): its key goes.
    assert!(matches!(
        store.leave(&q, places[2]).await?,
        LeaveOutcome::Released
    ));
    eventually("the key of an ended session is forgotten", async || {
        bound_len(&redis, &q).ok() == Some(3)
    })
    .await?;
    assert_eq!(store.ticket_key(&q, places[2]).await?, TicketKey::Over);
    assert_eq!(
        store.place_keys(&q, &places[3..6]).await?,
        [Some(key('D')), Some(key('E')), Some(key('F'))],
        "the admitted places with valid sessions keep theirs"
    );
    Ok(())
}
