//! The passthrough courier (`usher_dispatcher::tick`, `passthrough`) drains each queue in a
//! task of its own: a queue whose drain waits for its admission time (a join within a tick's
//! lead is admitted at that tick's admission time, up to 250 ms ahead) holds up no other
//! queue's passthrough admission; and one queue never drains twice at once, however many wakes
//! come while it drains, so each place is sent once, with one token, and a wake that comes
//! after a drain's last read of its list drains the queue once more; and a drain under way
//! when the dispatcher stops is let finish.
//!
//! A real dispatcher runs in-process against a real `redis-server`, the test playing the
//! gateway (a registered index and its stream) and waking the courier as a gateway does after
//! a join. Its ticks are 10 s apart: after the first one the test has the queues to itself.
//! A join is held as a tick made ahead leaves its queue (`join.lua`): the bucket's time
//! (`bucket_ms`) set ahead, so a join is admitted then (at most 250 ms on), not now. Where a
//! test must act between two of the courier's Redis calls, the dispatcher talks to Redis
//! through a relay (`usher_testkit::redis_relay`) that holds one call's answer back.

use std::collections::HashSet;

use usher_core::ids::{PlaceId, QueueId, ServerId};
use usher_core::keys::QueueKeys;
use usher_core::messages::StreamMessage;
use usher_core::store::{Joined, QueueConfig, Store};
use usher_core::time::now_ms;
use usher_testkit::line::{jwks_at, played_gateway, read_played, verify_token};
use usher_testkit::redis_relay::RedisRelay;
use usher_testkit::stack::{self, Server};
use usher_testkit::wait::{eventually, eventually_within};
use usher_testkit::{RedisProbe, RedisServer};

/// Long enough that no tick comes between the first one and the test's end (the courier's
/// sweep, once per tick, neither); the lead stays at its cap, 250 ms.
const TICK_MS: u64 = 10_000;
/// How far ahead a held join is admitted: the longest a tick leads (`join.lua` caps it there,
/// and the courier waits no longer).
const HELD_MS: u64 = 250;

/// A dispatcher holding two passthrough queues, `held` and `quick`, whose courier is
/// subscribed to wakes and holds both leases, with the played gateway's stream read so far.
/// The dispatcher talks to Redis through `relay` when there is one.
struct Courier {
    redis: RedisServer,
    relay: Option<RedisRelay>,
    store: Store,
    dispatcher: Server,
    gw: ServerId,
    index: u16,
    held: QueueId,
    quick: QueueId,
    log: Vec<(u64, StreamMessage)>,
}

impl Courier {
    async fn start(name: &str) -> anyhow::Result<Self> {
        Self::launch(name, false).await
    }

    /// [`Courier::start`] with the dispatcher's Redis connections through a [`RedisRelay`].
    async fn start_relayed(name: &str) -> anyhow::Result<Self> {
        Self::launch(name, true).await
    }

    async fn launch(name: &str, relayed: bool) -> anyhow::Result<Self> {
        let redis = RedisServer::start()?;
        let relay = match relayed {
            true => Some(RedisRelay::start(redis.port()).await?),
            false => None,
        };
        let store = Store::connect(&redis.url()).await?;
        let held = QueueId::new(format!("{name}-held"))?;
        let quick = QueueId::new(format!("{name}-quick"))?;
        for q in [&held, &quick] {
            let cfg = QueueConfig {
                admit_per_second: 1_000.0,
                passthrough: true,
                ..Default::default()
            };
            store.put_queue(q, &cfg).await?;
        }
        let (gw, index) = played_gateway(&store, &format!("gw-{name}")).await?;
        let url = relay.as_ref().map_or_else(|| redis.url(), RedisRelay::url);
        let dispatcher = stack::dispatcher(&url, TICK_MS).await?;
        let mut c = Self {
            redis,
            relay,
            store,
            dispatcher,
            gw,
            index,
            held,
            quick,
            log: Vec::new(),
        };
        // The first tick sets the buckets up (until then a join waits in line, and the queue
        // admits nobody in its join while it does).
        let probe = RedisProbe::connect(&c.redis.url()).await?;
        eventually("the first tick", async || {
            for q in [&c.held, &c.quick] {
                let (bucket_ms, _) = probe.last_tick(q).await?;
                anyhow::ensure!(bucket_ms > 0, "{q} has no bucket yet");
            }
            Ok(())
        })
        .await?;
        // One join on each, delivered: the tick left the leases with the courier, which is
        // subscribed. (Woken again at each try: a wake before the tick handed the courier its
        // leases finds nothing to drain.)
        let mut first = HashSet::new();
        eventually("a first passthrough admission on each queue", async || {
            for q in [&c.held, &c.quick] {
                if !first.iter().any(|(fq, _)| fq == q) {
                    if let Some(place) = c.pass(q).await? {
                        first.insert((q.clone(), place));
                    }
                }
                c.store.wake(q).await?;
            }
            read_played(&c.store, &c.gw, &mut c.log).await?;
            let seen = sent_places(&c.log);
            let missing = first.iter().filter(|qp| !seen.contains(qp)).count();
            anyhow::ensure!(first.len() == 2 && missing == 0, "{first:?}, seen {seen:?}");
            Ok(())
        })
        .await?;
        Ok(c)
    }

    /// Joins one place to `q` as a gateway does, without the wake; the place, if it passed.
    async fn pass(&self, q: &QueueId) -> anyhow::Result<Option<u64>> {
        match self.store.join_many(q, self.index, now_ms(), 1).await? {
            Joined::Places {
                last,
                admitted_now: 1,
                ..
            } => Ok(Some(last)),
            _ => Ok(None),
        }
    }

    /// Joins one place that passes, and wakes the courier.
    async fn join(&self, q: &QueueId) -> anyhow::Result<u64> {
        let place = self
            .pass(q)
            .await?
            .ok_or_else(|| anyhow::anyhow!("a join of {q} did not pass"))?;
        self.store.wake(q).await?;
        Ok(place)
    }

    /// Sets `held`'s bucket time ahead, as a tick made ahead leaves it: its joins from now on
    /// are admitted [`HELD_MS`] from now. Returns that time.
    async fn hold(&self) -> anyhow::Result<u64> {
        let at = now_ms() + HELD_MS;
        let mut conn = redis::Client::open(self.redis.url())?
            .get_multiplexed_async_connection()
            .await?;
        let () = redis::cmd("HSET")
            .arg(QueueKeys::new(&self.held).meta)
            .arg("bucket_ms")
            .arg(at)
            .query_async(&mut conn)
            .await?;
        Ok(at)
    }

    /// Reads the stream until each of `places` (queue, place) has been admitted (or the
    /// wait's limit).
    async fn read_until(&mut self, places: &HashSet<(QueueId, u64)>) -> anyhow::Result<()> {
        eventually("the admissions in the gateway's stream", async || {
            read_played(&self.store, &self.gw, &mut self.log).await?;
            let seen = sent_places(&self.log);
            let missing: Vec<_> = places.difference(&seen).collect();
            anyhow::ensure!(missing.is_empty(), "not yet admitted: {missing:?}");
            Ok(())
        })
        .await
    }
}

/// One admission as the gateway's stream carries it.
#[derive(Debug, Clone)]
struct Sent {
    /// The stream entry's time (Redis's clock), and its index in the stream.
    entry_ms: u64,
    entry: usize,
    queue: QueueId,
    place: u64,
    admitted_at_ms: u64,
    token: String,
}

/// Every admission in `log`, in stream order.
fn admitted(log: &[(u64, StreamMessage)]) -> Vec<Sent> {
    let mut sent = Vec::new();
    for (entry, (entry_ms, m)) in log.iter().enumerate() {
        if let StreamMessage::Admitted { queue, items } = m {
            sent.extend(items.iter().map(|a| Sent {
                entry_ms: *entry_ms,
                entry,
                queue: queue.clone(),
                place: a.place.0,
                admitted_at_ms: a.admitted_at_ms,
                token: a.token.clone(),
            }));
        }
    }
    sent
}

/// The (queue, place) of every admission in `log`: place numbers are per queue.
fn sent_places(log: &[(u64, StreamMessage)]) -> HashSet<(QueueId, u64)> {
    admitted(log)
        .into_iter()
        .map(|a| (a.queue, a.place))
        .collect()
}

/// The one admission of `place` in `q` (an error if none, or more than one).
fn the_admission(log: &[(u64, StreamMessage)], q: &QueueId, place: u64) -> anyhow::Result<Sent> {
    let mut found = admitted(log)
        .into_iter()
        .filter(|a| &a.queue == q && a.place == place);
    let one = found
        .next()
        .ok_or_else(|| anyhow::anyhow!("{q} place {place} not admitted"))?;
    anyhow::ensure!(found.next().is_none(), "{q} place {place} admitted twice");
    Ok(one)
}

/// While the courier waits for `held`'s admission time, `quick`'s join (woken after) is
/// delivered: its `admitted` comes first in the gateway's stream, before `held`'s admission
/// time. (A courier draining one queue after another sends it only after `held`'s.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_join_does_not_delay_another_queues_admission() -> anyhow::Result<()> {
    let mut c = Courier::start("apart").await?;
    let held_at = c.hold().await?;
    // Woken in this order on one connection: the courier hears `held` first, and is waiting
    // for its time when `quick`'s wake comes.
    let held = c.join(&c.held).await?;
    let quick = c.join(&c.quick).await?;
    c.read_until(&HashSet::from([
        (c.held.clone(), held),
        (c.quick.clone(), quick),
    ]))
    .await?;
    c.dispatcher.stop().await?;

    let held = the_admission(&c.log, &c.held, held)?;
    let quick = the_admission(&c.log, &c.quick, quick)?;
    assert_eq!(held.admitted_at_ms, held_at, "the join was held: {held:?}");
    assert!(
        held.entry_ms >= held_at,
        "held until its admission time: {held:?}"
    );
    assert!(
        quick.entry < held.entry && quick.entry_ms < held_at,
        "the other queue's admission waited for the held one: {quick:?} then {held:?}"
    );
    Ok(())
}

/// Wakes for `held` while its drain waits for the admission time, each after a join, start
/// no second drain of it (two would send the same entries), and none is lost: each place is
/// sent exactly once, with one token, which verifies as a booking service checks it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_wakes_for_a_draining_queue_deliver_each_place_once() -> anyhow::Result<()> {
    let mut c = Courier::start("once").await?;
    let held_at = c.hold().await?;
    let mut held = vec![c.join(&c.held).await?];
    let quick = c.join(&c.quick).await?;
    // Joins and wakes while the first drain waits (a few milliseconds each, well inside the
    // 250 ms it waits).
    for _ in 0..15 {
        held.push(c.join(&c.held).await?);
    }
    let mut all: HashSet<(QueueId, u64)> = held.iter().map(|&p| (c.held.clone(), p)).collect();
    all.insert((c.quick.clone(), quick));
    c.read_until(&all).await?;
    let jwks = jwks_at(&reqwest::Client::new(), &c.dispatcher.url()).await?;
    c.dispatcher.stop().await?;

    let mut tokens = HashSet::new();
    for &place in &held {
        let sent = the_admission(&c.log, &c.held, place)?;
        assert!(sent.entry_ms >= sent.admitted_at_ms, "sent early: {sent:?}");
        // Sent by the drains the wakes started, not by the next sweep (a tick, 10 s, on).
        assert!(sent.entry_ms < held_at + 2_000, "sent late: {sent:?}");
        let claims = verify_token(&jwks, &sent.token, c.held.as_str())?;
        assert_eq!(
            claims["sub"].as_str().map(str::to_owned),
            Some(PlaceId(place).to_string()),
            "{claims}"
        );
        assert!(tokens.insert(sent.token), "one token per place");
    }
    // The first held join waits for the time set; the ones after it too, unless the machine
    // was so slow that they came past it.
    assert_eq!(
        the_admission(&c.log, &c.held, held[0])?.admitted_at_ms,
        held_at
    );
    // And the other queue's admission, woken amid them, went first.
    let quick = the_admission(&c.log, &c.quick, quick)?;
    verify_token(&jwks, &quick.token, c.quick.as_str())?;
    let first_held = admitted(&c.log)
        .into_iter()
        .filter(|a| a.queue == c.held && a.admitted_at_ms == held_at)
        .map(|a| a.entry)
        .min();
    assert!(
        first_held.is_some_and(|e| quick.entry < e),
        "the other queue's admission waited for the held one: {quick:?}"
    );
    // Nothing else of `held` was sent: its admissions are these and the start-up's one.
    let sent = admitted(&c.log)
        .iter()
        .filter(|a| a.queue == c.held)
        .count();
    assert_eq!(sent, held.len() + 1, "admissions of {}", c.held);
    Ok(())
}

/// How soon after the held answer is let go a drain once more sends the second join: well
/// before the next sweep (a tick, 10 s after the first, which the test follows by under a
/// second), with room for a loaded machine.
const DRAINED_WITHIN_MS: u64 = 3_000;

/// A wake that comes after a drain's last read of its list, while that drain is still under
/// way, drains the queue once more as soon as the drain ends: the join it was sent for is
/// delivered then, once, not at the next sweep (a tick, 10 s, on).
///
/// The relay holds Redis's answer to the drain's last read (the read after it trimmed what it
/// sent, which finds the list empty) while a second join and its wake come. A join of the
/// other queue, woken after it on the same connection, shows that the courier has heard that
/// wake (the other queue's drain reads its list) before the answer is let go.
///
/// The rule that finds that read knows the shape of the courier's calls, which only
/// `usher-core` otherwise knows: the trim is a script (`EVAL…`) naming the `passed` list, and
/// the read an `LRANGE` of it. A change there makes the wait for the held answer time out: the
/// test fails, it does not pass without the read held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_after_a_drains_last_read_drains_the_queue_once_more() -> anyhow::Result<()> {
    let mut c = Courier::start_relayed("again").await?;
    let relay = c.relay.take().expect("started relayed");
    let quick_list = QueueKeys::new(&c.quick).passed;
    let held_at = c.hold().await?;
    // The first read of `held`'s list after the drain trimmed it (a script naming the list).
    let list = QueueKeys::new(&c.held).passed;
    let mut trimmed = false;
    relay.hold_after(move |words| {
        if !words.contains(&list) {
            return false;
        }
        let command = words[0].to_ascii_uppercase();
        trimmed |= command.starts_with("EVAL");
        trimmed && command == "LRANGE"
    });
    let first = c.join(&c.held).await?;
    eventually("the drain's last read, answered and held", async || {
        let kept = relay.kept();
        // The empty list's answer (after any other answers on that connection meanwhile).
        anyhow::ensure!(
            kept.windows(4).any(|w| w == b"*0\r\n"),
            "{:?}",
            String::from_utf8_lossy(&kept)
        );
        Ok(())
    })
    .await?;
    let mark = relay.seen();
    let second = c.join(&c.held).await?;
    let quick = c.join(&c.quick).await?;
    eventually("the other queue's drain", async || {
        relay.saw_since(mark, |words| words.contains(&quick_list))
    })
    .await?;
    let released_at = now_ms();
    relay.release();
    let all = HashSet::from([
        (c.held.clone(), first),
        (c.held.clone(), second),
        (c.quick.clone(), quick),
    ]);
    eventually_within(
        "the second join's admission, well before the next sweep",
        std::time::Duration::from_millis(DRAINED_WITHIN_MS),
        async || {
            read_played(&c.store, &c.gw, &mut c.log).await?;
            let missing: Vec<_> = all.difference(&sent_places(&c.log)).cloned().collect();
            anyhow::ensure!(missing.is_empty(), "not yet admitted: {missing:?}");
            Ok(())
        },
    )
    .await?;
    let jwks = jwks_at(&reqwest::Client::new(), &c.dispatcher.url()).await?;
    c.dispatcher.stop().await?;
    // Whatever else the dispatcher sent before it stopped: a place sent twice shows here.
    read_played(&c.store, &c.gw, &mut c.log).await?;

    let first = the_admission(&c.log, &c.held, first)?;
    let second = the_admission(&c.log, &c.held, second)?;
    assert_eq!(
        first.admitted_at_ms, held_at,
        "the first join was held: {first:?}"
    );
    assert!(
        second.entry > first.entry && second.entry_ms >= released_at,
        "the second join went after the drain's last read: {first:?}, {second:?}"
    );
    assert!(
        second.entry_ms < released_at + DRAINED_WITHIN_MS,
        "sent by a drain once more, not by a sweep: {second:?}"
    );
    let claims = verify_token(&jwks, &second.token, c.held.as_str())?;
    assert_eq!(
        claims["sub"].as_str().map(str::to_owned),
        Some(PlaceId(second.place).to_string()),
        "{claims}"
    );
    assert_ne!(first.token, second.token, "one token per place");
    Ok(())
}

/// A drain under way when the dispatcher stops is let finish (for up to a tick's lead and a
/// little more), not cut between its sends and its trim: the held join's admission still
/// reaches its gateway, at its admission time, though the stop came before that time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_under_way_at_shutdown_finishes() -> anyhow::Result<()> {
    let mut c = Courier::start("stop").await?;
    // The stop must come while `held`'s drain waits for its time. It nearly always does
    // (a few ms of the 250); on a machine so slow that the time came first, try again.
    let mut tries = 0;
    let (held_at, held, stop_at) = loop {
        tries += 1;
        let held_at = c.hold().await?;
        // Woken in this order on one connection: once `quick` is admitted, `held`'s drain
        // is under way, waiting for `held_at`.
        let held = c.join(&c.held).await?;
        let quick = c.join(&c.quick).await?;
        c.read_until(&HashSet::from([(c.quick.clone(), quick)]))
            .await?;
        let stop_at = now_ms();
        let sent = sent_places(&c.log);
        if !sent.contains(&(c.held.clone(), held)) && stop_at + 50 < held_at || tries == 3 {
            break (held_at, held, stop_at);
        }
        // Too late: let this try's drain end before the next (a join meanwhile would only mark
        // it to drain once more, which the stop would cut short).
        c.read_until(&HashSet::from([(c.held.clone(), held)]))
            .await?;
    };
    assert!(
        stop_at + 50 < held_at,
        "the stop never came well before the admission time"
    );
    c.dispatcher.stop().await?;
    read_played(&c.store, &c.gw, &mut c.log).await?;
    let sent = the_admission(&c.log, &c.held, held)?;
    assert_eq!(sent.admitted_at_ms, held_at, "{sent:?}");
    assert!(sent.entry_ms >= held_at, "sent before its time: {sent:?}");
    Ok(())
}
