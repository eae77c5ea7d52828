//! Larger lines: the drain rate, the Redis cost of waiting, the memory of a place.

use std::time::Duration;

use serde_json::{json, Value};
use usher_core::ids::PlaceId;
use usher_core::ids::QueueId;
use usher_core::messages::CloseReason;
use usher_core::store::{Lease, PlaceState, Store};
use usher_core::time::now_ms;
use usher_dispatcher::tick::{Admitter, Settings};
use usher_testkit::line::*;
use usher_testkit::probe::{self, RedisProbe};
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::wait::eventually_within;
use usher_testkit::SseClient;

/// A browser-like client for each of a stack's first two gateways.
fn two_clients(stack: &Stack) -> [SseClient; 2] {
    [
        SseClient::new(stack.gateway_url(0)),
        SseClient::new(stack.gateway_url(1)),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_connected_waiters_drain_at_the_configured_rate() -> anyhow::Result<()> {
    let _solo = usher_testkit::solo().await; // heavy, and measures a rate
    const N: usize = 2000;
    const RATE: f64 = 400.0;
    let stack = Stack::start(StackOptions {
        gateways: 2,
        ..Default::default()
    })
    .await?;
    stack.create_queue("drain", PAUSED).await?;
    let clients = two_clients(&stack);
    let mut watchers = Vec::with_capacity(N);
    for i in 0..N {
        watchers.push(join_watch(&clients[i % 2], "drain").await?.2);
    }
    assert_eq!(stack.queue("drain").await?["waiting"], N as u64);
    stack
        .put_queue("drain", json!({"admit_per_second": RATE}))
        .await?;
    eventually_within(
        "every waiter is admitted",
        Duration::from_secs(60),
        async || watchers.iter().all(|w| w.last("admitted").is_some()),
    )
    .await?;
    let mut at: Vec<u64> = watchers
        .iter()
        .map(|w| {
            let a = w.last("admitted").expect("admitted");
            let at = data(&a)["admitted_at"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            usher_core::time::parse_rfc3339_ms(&at).expect("admitted_at is RFC 3339")
        })
        .collect();
    at.sort_unstable();
    // Admission happens in per-tick batches. Each batch after the first spends what the bucket
    // refilled since the one before: the rate times the gap, the gap counted up to 1 s (the
    // refill's cap, so a dispatcher stalled longer loses that budget by design). The last
    // batch is partial (the line ran out), so the rate is measured from the first batch to the
    // one before the last.
    let mut batches = std::collections::BTreeMap::<u64, usize>::new();
    for &t in &at {
        *batches.entry(t).or_default() += 1;
    }
    let times: Vec<u64> = batches.keys().copied().collect();
    assert!(times.len() >= 3, "admitted in a few ticks: {batches:?}");
    let inner = &times[..times.len() - 1];
    let admitted: usize = inner[1..].iter().map(|t| batches[t]).sum();
    let refill_ms: u64 = inner.windows(2).map(|w| (w[1] - w[0]).min(1000)).sum();
    let capped = inner.windows(2).filter(|w| w[1] - w[0] > 1000).count();
    let rate = admitted as f64 / (refill_ms as f64 / 1000.0);
    let first_batch = batches[&times[0]];
    println!("gaps over the refill cap: {capped}");
    println!("drained {N} at {rate:.1}/s (configured {RATE}/s), first batch {first_batch}");
    assert!(
        (rate - RATE).abs() <= RATE * 0.05,
        "drain rate {rate:.1}/s is not within 5% of {RATE}/s"
    );
    assert_eq!(stack.queue("drain").await?["admitted_total"], N as u64);
    Ok(())
}

/// A tick admitting more than one script call's worth: every browser is admitted in that one
/// tick, at one admission time, in line order, with a token a booking service accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_bigger_than_one_script_call_admits_everyone_at_one_time() -> anyhow::Result<()> {
    let _solo = usher_testkit::solo().await; // heavy
    const N: usize = 2500;
    // Ticks of 250 ms (an unoptimised test build needs the time), and a lease long enough that
    // minting 1,000 tokens between script calls on a starved machine cannot outlast it: there
    // is one dispatcher, so the lease is not what this test is about.
    let stack = Stack::start(StackOptions {
        gateways: 2,
        tick_ms: 250,
        lease_ttl_ms: Some(10_000),
        ..Default::default()
    })
    .await?;
    assert!(N as u64 > 2 * usher_core::store::ADMIT_PER_CALL);
    stack.create_queue("big", PAUSED).await?;
    let clients = two_clients(&stack);
    let mut watchers = Vec::with_capacity(N);
    for i in 0..N {
        let (ticket, _, w) = join_watch(&clients[i % 2], "big").await?;
        watchers.push((place_of(&ticket), w));
    }
    // 40,000/s: a tick at least 62.5 ms after the one before (even one right after a late
    // tick) has budget for the whole line, so it goes in the first tick after this.
    stack
        .put_queue("big", json!({"admit_per_second": 40_000.0}))
        .await?;
    eventually_within(
        "every waiter is admitted",
        Duration::from_secs(30),
        async || watchers.iter().all(|(_, w)| w.last("admitted").is_some()),
    )
    .await?;
    let admitted: Vec<(u64, Value)> = watchers
        .iter()
        .map(|(p, w)| (*p, data(&w.last("admitted").expect("admitted"))))
        .collect();
    let mut times: std::collections::BTreeMap<&str, usize> = Default::default();
    for (_, a) in &admitted {
        *times
            .entry(a["admitted_at"].as_str().unwrap_or_default())
            .or_default() += 1;
    }
    assert_eq!(times.len(), 1, "one admission time: {times:?}");
    let jwks = jwks(&stack).await?;
    for (place, a) in &admitted {
        let claims = verify_token(&jwks, a["token"].as_str().unwrap_or_default(), "big")?;
        assert_eq!(claims["sub"], place.to_string());
    }
    let q = stack.queue("big").await?;
    assert_eq!(q["admitted_total"], N as u64, "{q}");
    assert_eq!(q["waiting"], 0, "{q}");
    Ok(())
}

/// A fresh Redis with one open queue admitting `admit_per_second`, and the queue's lease (as
/// the dispatcher replica `replica` would hold it), for tests of the tick at the Redis level.
async fn queue_on_redis(
    name: &str,
    admit_per_second: f64,
    replica: &str,
) -> anyhow::Result<(usher_testkit::RedisServer, Store, QueueId, Lease)> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new(name)?;
    store
        .put_queue(
            &q,
            &usher_core::store::QueueConfig {
                admit_per_second,
                ..Default::default()
            },
        )
        .await?;
    // Long enough for the thousands of joins a test makes before its first tick.
    let lease = store
        .acquire_lease(&q, replica, Duration::from_secs(600))
        .await?
        .ok_or_else(|| anyhow::anyhow!("the lease of a new queue is free"))?;
    Ok((redis, store, q, lease))
}

/// `n` places at the tail of `q`, taken one by one for gateway 7; their ids in line order.
async fn line_of(store: &Store, q: &QueueId, n: u64) -> anyhow::Result<Vec<PlaceId>> {
    let mut places = Vec::new();
    for _ in 0..n {
        match probe::join(store, q, 7, now_ms()).await? {
            PlaceState::Waiting { place, .. } => places.push(place),
            other => anyhow::bail!("join: {other:?}"),
        }
    }
    Ok(places)
}

/// A dispatcher replica named `name` on `redis` (100 ms ticks, 10 s leases), with a fresh
/// signing key, driven by the test one tick at a time.
fn replica(
    store: &Store,
    name: &str,
    redis: &usher_testkit::RedisServer,
) -> anyhow::Result<Admitter> {
    let settings = Settings {
        replica: name.into(),
        tick: Duration::from_millis(100),
        lease_ttl: Duration::from_secs(10),
        exact_positions: 100,
        redis: usher_core::store::RedisArgs::standalone(redis.url()),
    };
    let key = std::sync::Arc::new(usher_mint::token::SigningKey::from_pkcs8_pem(
        &usher_mint::token::SigningKey::generate_pem()?,
    )?);
    Ok(Admitter::new(store.clone(), key, settings))
}

/// The calls of one big tick at the Redis level: each admits [`ADMIT_PER_CALL`] places at
/// most and says whether the tick's budget has more; together they admit exactly the budget,
/// in line order, and a further call at the same time admits nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_tick_is_admitted_in_calls_that_spend_exactly_its_budget() -> anyhow::Result<()> {
    use usher_core::store::{Tick, ADMIT_PER_CALL};
    let (_redis, store, q, lease) = queue_on_redis("calls", 25_000.0, "test").await?;
    for _ in 0..3000 {
        probe::join(&store, &q, 7, now_ms()).await?;
    }
    let now = now_ms();
    // The queue's first tick is budgeted for 100 ms: 2,500 places.
    let args = usher_testkit::tick_args(&lease, now);
    let mut calls = Vec::new();
    let mut places = Vec::new();
    for tick in usher_testkit::tick_calls(&store, &q, &args).await? {
        let Tick::Ticked(out) = tick else {
            panic!("open queue ticks")
        };
        assert!(out.admitted <= ADMIT_PER_CALL, "{}", out.admitted);
        assert!(out.fresh.iter().all(|e| e.admitted_at_ms == now));
        assert_eq!(
            out.runs.is_empty(),
            out.more,
            "the last call takes the snapshot"
        );
        places.extend(out.fresh.iter().map(|e| e.place.0));
        calls.push((out.admitted, out.more, out.waiting));
    }
    assert_eq!(
        calls,
        vec![(1000, true, 2000), (1000, true, 1000), (500, false, 500)]
    );
    assert!(places.windows(2).all(|w| w[0] < w[1]), "line order");
    let Tick::Ticked(again) = store.tick(&q, &args).await? else {
        panic!("open queue ticks")
    };
    assert_eq!((again.admitted, again.more), (0, false), "no budget left");
    Ok(())
}

/// Places of a gateway dead longer than the grace period are dropped, not admitted, when they
/// reach the head; one call pops at most [`ADMIT_PER_CALL`] of them beyond its admissions and
/// then says `more`, so a long run of them costs several short calls, and the tick still
/// admits its whole budget from the live places behind them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_run_of_dead_gateways_places_is_dropped_in_short_calls() -> anyhow::Result<()> {
    use usher_core::ids::ServerId;
    use usher_core::store::{GatewayInfo, Tick, TickArgs, ADMIT_PER_CALL};
    let (_redis, store, q, lease) = queue_on_redis("dead", 1000.0, "test").await?;
    const DEAD: u64 = 1500;
    for _ in 0..DEAD {
        probe::join(&store, &q, 9, now_ms()).await?;
    }
    for _ in 0..200 {
        probe::join(&store, &q, 7, now_ms()).await?;
    }
    let now = now_ms();
    let gateways = [
        GatewayInfo {
            index: 9,
            alive_until_ms: now - 600_000,
            server_id: ServerId::new("gone")?,
        },
        GatewayInfo {
            index: 7,
            alive_until_ms: now + 600_000,
            server_id: ServerId::new("live")?,
        },
    ];
    // The first tick is budgeted for 100 ms: 100 places.
    let args = TickArgs {
        gateways: &gateways,
        ..usher_testkit::tick_args(&lease, now)
    };
    let mut calls = Vec::new();
    for tick in usher_testkit::tick_calls(&store, &q, &args).await? {
        let Tick::Ticked(out) = tick else {
            panic!("open queue ticks")
        };
        assert!(
            out.admitted + out.dropped <= 100 + ADMIT_PER_CALL,
            "{out:?}"
        );
        assert!(out.fresh.iter().all(|e| e.gateway == 7));
        calls.push((out.admitted, out.dropped, out.more));
    }
    assert_eq!(calls, vec![(0, 1100, true), (100, 400, false)]);
    let stats = store.queue_stats(&q, now_ms()).await?;
    assert_eq!(
        (stats.waiting, stats.dropped_total),
        (100, DEAD),
        "{stats:?}"
    );
    Ok(())
}

/// A replica that crashed after a tick script call but before delivering leaves outbox
/// entries behind. The next tick delivers them first, with this tick's first call, and still
/// admits the rest of its budget in further calls: everyone ends up admitted with a stored
/// token, nothing is left in the outbox, and nobody is admitted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_after_a_crash_delivers_the_leftovers_then_admits_its_whole_budget(
) -> anyhow::Result<()> {
    use usher_core::store::Tick;
    const N: u64 = 3000;
    let (redis, store, q, lease) = queue_on_redis("crash", 25_000.0, "replica-a").await?;
    let places = line_of(&store, &q, N).await?;
    // The crashed holder: one call (1,000 of its 2,500), never delivered.
    let crashed_at = now_ms() - 100;
    let Tick::Ticked(first) = store
        .tick(&q, &usher_testkit::tick_args(&lease, crashed_at))
        .await?
    else {
        panic!("open queue ticks")
    };
    assert_eq!(
        (first.admitted, first.more, first.outbox_len),
        (1000, true, 1)
    );

    // The same replica restarted: its next tick (100 ms later: 2,500 more budget).
    let mut admitter = replica(&store, "replica-a", &redis)?;
    let report = admitter.tick().await?;
    assert_eq!(report.admitted, N - 1000, "{report:?}");
    assert_eq!(report.delivered, N, "{report:?}");
    let (left, _) = store
        .outbox(&q, usher_core::store::OutboxList::Ticks, 100)
        .await?;
    assert_eq!(left, 0, "outbox emptied");
    let stats = store.queue_stats(&q, now_ms()).await?;
    assert_eq!((stats.waiting, stats.admitted_total), (0, N), "{stats:?}");
    // The first 1,000 in line keep the crashed tick's admission time (their tokens were
    // minted for it); the rest were admitted by the new tick.
    for (i, p) in places.into_iter().enumerate() {
        match store.status(&q, p, now_ms()).await? {
            PlaceState::Admitted(rec) if i < 1000 => {
                assert_eq!(rec.admitted_at_ms, crashed_at, "place {p:?}")
            }
            PlaceState::Admitted(rec) => assert!(rec.admitted_at_ms > crashed_at, "place {p:?}"),
            other => panic!("place {p:?}: {other:?}"),
        }
    }
    Ok(())
}

/// A queue changing hands never gets an admission time earlier than its previous holder's:
/// a tick planned before the hand-over that reaches the lease only after it (a loaded
/// machine) is stamped with the time it holds the lease. Here the previous holder stopped
/// between the calls of a big tick, leaving budget in the bucket for whoever comes next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_tick_after_a_hand_over_never_stamps_an_earlier_time() -> anyhow::Result<()> {
    use usher_core::store::Tick;
    const N: u64 = 1500;
    let (redis, store, q, lease) = queue_on_redis("handover", 25_000.0, "replica-a").await?;
    let places = line_of(&store, &q, N).await?;
    // Replica A: one call of its tick (1,000 of a 2,500 budget), then it lets the queue go.
    let a_at = now_ms();
    let Tick::Ticked(first) = store
        .tick(&q, &usher_testkit::tick_args(&lease, a_at))
        .await?
    else {
        panic!("open queue ticks")
    };
    assert!(first.more && first.admitted == 1000, "{first:?}");
    store.release_lease(&q, &lease).await?;
    // Replica B's tick was planned 50 ms before A's, and gets the lease only now.
    let mut b = replica(&store, "replica-b", &redis)?;
    let report = b.tick_at(a_at - 50).await?;
    assert_eq!(report.admitted, N - 1000, "{report:?}");
    // In line order, no admission time is earlier than the one before it.
    let mut times = Vec::new();
    for p in places {
        match store.status(&q, p, now_ms()).await? {
            PlaceState::Admitted(rec) => times.push(rec.admitted_at_ms),
            other => panic!("place {p:?}: {other:?}"),
        }
    }
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "admission times went backwards at the hand-over: A at {a_at}, B at {}",
        times[times.len() - 1]
    );
    Ok(())
}

/// The dispatcher's Redis work per tick does not depend on how many wait: count commands
/// (INFO commandstats) over the dispatcher's own ticks with a short and a long line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_commands_per_tick_do_not_grow_with_the_line() -> anyhow::Result<()> {
    // The dispatcher runs as its own process, so its `/metrics` tick count is its own (the
    // in-process recorder is shared by every stack of this test binary); a starved machine
    // then runs fewer ticks in a window without making a tick look dearer.
    let server = usher_testkit::RedisServer::start()?;
    let dispatcher = usher_testkit::procs::Proc::start(
        "usher-dispatcher",
        &[
            ("USHER_REDIS_URL", server.url()),
            ("USHER_TICK_MS", "100".into()),
        ],
    )
    .await?;
    let gateway = usher_testkit::stack::gateway(&server.url()).await?;
    let admin = usher_testkit::config::admin_client();
    let store = Store::connect(&server.url()).await?;
    let redis = RedisProbe::connect(&server.url()).await?;
    let client = SseClient::new(gateway.url());
    let mut per_tick = Vec::new();
    for (queue, n) in [("short", 10usize), ("long", 3000usize)] {
        admin
            .put(format!("{}/admin/queues/{queue}", dispatcher.url()))
            .json(&json!({"admit_per_second": PAUSED, "passthrough": false}))
            .send()
            .await?
            .error_for_status()?;
        let q = QueueId::new(queue)?;
        // One connected browser (so state is published to its gateway); the rest join through
        // the store, as other gateways' browsers would.
        let (_t, _p, _w) = join_watch(&client, queue).await?;
        let gw_index = 999u16;
        for _ in 1..n {
            probe::join(&store, &q, gw_index, now_ms()).await?;
        }
        // Settle for 3 ticks, then count commands over 20 ticks; INFO is read right after the
        // tick count moves, so at most a tick's commands fall on the wrong side of the window.
        let settled = ticks_after(&admin, &dispatcher, None, 3).await?;
        let before = total_calls(&redis).await?;
        let counted = ticks_after(&admin, &dispatcher, Some(settled), 20).await?;
        let after = total_calls(&redis).await?;
        per_tick.push((after - before) as f64 / (counted - settled) as f64);
        admin
            .put(format!("{}/admin/queues/{queue}", dispatcher.url()))
            .json(&json!({"open": false}))
            .send()
            .await?
            .error_for_status()?;
    }
    println!("redis commands per tick (INFO commandstats, script-internal calls included): short line {:.1}, long line {:.1}", per_tick[0], per_tick[1]);
    // Nothing per waiter (2,999 more waiters would be +2,999 with per-user ZRANK): only a
    // handful of position samples (10% apart beyond the 1,000 exact places: ln(3)/ln(1.1) ~ 12
    // for 3,000 waiting) and heartbeat noise may be added.
    assert!(
        per_tick[1] <= per_tick[0] + 30.0,
        "commands per tick grew with the line: {per_tick:?}"
    );
    gateway.stop().await
}

/// Waits until the dispatcher has ticked `n` times since `since` (its `/metrics` tick count;
/// `None`: since now) and returns the count then.
async fn ticks_after(
    admin: &reqwest::Client,
    dispatcher: &usher_testkit::procs::Proc,
    since: Option<u64>,
    n: u64,
) -> anyhow::Result<u64> {
    let since = match since {
        Some(c) => c,
        None => tick_count(admin, dispatcher).await?,
    };
    let what = format!("{n} more ticks");
    eventually_within(&what, Duration::from_secs(60), async || {
        let c = tick_count(admin, dispatcher).await?;
        anyhow::ensure!(c >= since + n, "{} ticks so far", c - since);
        Ok(c)
    })
    .await
}

/// The dispatcher's tick count (`usher_tick_duration_seconds_count` on its `/metrics`).
async fn tick_count(
    http: &reqwest::Client,
    dispatcher: &usher_testkit::procs::Proc,
) -> anyhow::Result<u64> {
    let text = http
        .get(format!("{}/metrics", dispatcher.url()))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix("usher_tick_duration_seconds_count "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0) as u64)
}

async fn total_calls(redis: &RedisProbe) -> anyhow::Result<u64> {
    let info = redis.info("commandstats").await?;
    Ok(info
        .lines()
        .filter_map(|l| l.split("calls=").nth(1))
        .filter_map(|r| r.split(',').next()?.parse::<u64>().ok())
        .sum())
}

/// A waiting place costs at most 110 bytes of Redis memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_place_costs_at_most_110_bytes() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("mem")?;
    store
        .put_queue(&q, &usher_core::store::QueueConfig::default())
        .await?;
    const N: u64 = 20_000;
    for _ in 0..N {
        probe::join(&store, &q, 7, now_ms()).await?;
    }
    let bytes = RedisProbe::connect(&redis.url())
        .await?
        .waiting_memory(&q)
        .await?;
    let per = bytes as f64 / N as f64;
    println!("waiting set: {bytes} bytes for {N} places = {per:.1} B/place");
    assert!(per <= 110.0, "{per:.1} B per waiting place");
    Ok(())
}

/// The tick script's snapshot gives every waiting place its exact position in the first 1,000
/// and within 1% beyond, also with many random holes (leavers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_positions_are_exact_then_within_one_percent() -> anyhow::Result<()> {
    use rand::{Rng, SeedableRng};
    use usher_core::messages::QueueState;
    use usher_gateway::position::{Standing, Standings};

    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("snap")?;
    store
        .put_queue(
            &q,
            &usher_core::store::QueueConfig {
                admit_per_second: PAUSED,
                ..Default::default()
            },
        )
        .await?;
    const N: u64 = 15_000;
    let mut places = Vec::new();
    for _ in 0..N {
        match probe::join(&store, &q, 7, now_ms()).await? {
            usher_core::store::PlaceState::Waiting { place, .. } => places.push(place),
            other => panic!("join: {other:?}"),
        }
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut line = Vec::new();
    for (i, &p) in places.iter().enumerate() {
        // Leavers cluster in bursts here and there, the hard case for interpolation.
        let burst = (i / 1000) % 3 == 1;
        if rng.gen_bool(if burst { 0.5 } else { 0.05 }) {
            store.leave(&q, p).await?;
        } else {
            line.push(p);
        }
    }
    let lease = store
        .acquire_lease(&q, "test", Duration::from_secs(10))
        .await?
        .expect("free lease");
    let tick = usher_testkit::tick_once(&store, &q, &lease).await?;
    let usher_core::store::Tick::Ticked(out) = tick else {
        panic!("open queue ticks: {tick:?}")
    };
    assert_eq!(out.waiting, line.len() as u64);
    println!(
        "{} waiting, {} runs, {} samples",
        out.waiting,
        out.runs.len(),
        out.samples.len()
    );
    let state = QueueState {
        waiting: out.waiting,
        runs: out.runs,
        samples: out.samples,
        ..QueueState::empty(q.clone())
    };
    let mut worst = 0.0f64;
    for (i, &p) in line.iter().enumerate() {
        let truth = i as u64 + 1;
        let Standing::At(got) = state.standing(p.seq()) else {
            panic!("place {p:?} not placed")
        };
        if truth <= 1000 {
            assert_eq!(got, truth, "exact window");
        }
        worst = worst.max((got as f64 - truth as f64).abs() / truth as f64);
    }
    println!("worst relative position error {:.4}%", worst * 100.0);
    assert!(worst <= 0.01, "worst relative error {worst}");
    Ok(())
}

/// One join call takes a batch of places: consecutive, in the batch's order, the last at the
/// tail; batches of no places or too many are refused, and a closed queue takes none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_call_takes_a_batch_of_consecutive_places_at_the_tail() -> anyhow::Result<()> {
    use usher_core::store::{Joined, PlaceState, JOIN_BATCH_MAX};
    let (_redis, store, q, _lease) = queue_on_redis("batch", PAUSED, "test").await?;
    let PlaceState::Waiting { place: first, .. } = probe::join(&store, &q, 3, now_ms()).await?
    else {
        panic!("an open queue takes a place")
    };
    let joined = store.join_many(&q, 3, now_ms(), 5).await?;
    let states: Vec<(u64, u64)> = (0..5)
        .map(|i| match joined.state(i) {
            PlaceState::Waiting {
                place,
                position,
                waiting,
                ..
            } => {
                assert_eq!(waiting, 6);
                (place.0, position)
            }
            other => panic!("waiting expected, got {other:?}"),
        })
        .collect();
    let expected: Vec<(u64, u64)> = (1..=5).map(|i| (first.0 + i, i + 1)).collect();
    assert_eq!(states, expected);
    // Redis agrees: six places, in that order, held by gateway 3.
    let head = store.head(&q, 10).await?;
    let places: Vec<u64> = head.iter().map(|h| h.0).collect();
    assert_eq!(places, (first.0..=first.0 + 5).collect::<Vec<_>>());
    assert!(head.iter().all(|h| h.1 == 3), "{head:?}");
    assert!(store.join_many(&q, 3, now_ms(), 0).await.is_err());
    assert!(store
        .join_many(&q, 3, now_ms(), JOIN_BATCH_MAX + 1)
        .await
        .is_err());
    let big = store.join_many(&q, 4, now_ms(), JOIN_BATCH_MAX).await?;
    assert!(
        matches!(big.state(JOIN_BATCH_MAX - 1), PlaceState::Waiting { position, .. } if position == 6 + JOIN_BATCH_MAX as u64)
    );
    store.close_queue(&q, CloseReason::QueueClosed).await?;
    assert_eq!(
        store.join_many(&q, 3, now_ms(), 2).await?,
        Joined::QueueClosed
    );
    Ok(())
}

/// Browsers joining one gateway at the same moment: their joins go to Redis in batches (fewer
/// calls than browsers), and every browser still gets its own place and its own position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_arriving_together_share_redis_calls_and_each_gets_its_own_place(
) -> anyhow::Result<()> {
    const N: usize = 300;
    let stack = Stack::start(StackOptions::default()).await?;
    stack.create_queue("together", PAUSED).await?;
    let redis = RedisProbe::connect(&stack.redis.url()).await?;
    let before = redis.calls("incrby").await?;
    let client = SseClient::new(stack.gateway_url(0));
    let joins = (0..N).map(|_| join(&client, "together"));
    let joined = futures::future::try_join_all(joins).await?;
    let calls = redis.calls("incrby").await? - before;
    // In place order, the positions each browser was told are exactly 1..=N: every browser
    // has its own place, and its position is that place's in the line.
    let mut told: Vec<(u64, u64)> = joined.iter().map(|(t, p, _)| (place_of(t), *p)).collect();
    told.sort_unstable();
    println!("{N} joins in {calls} join calls");
    let places: std::collections::BTreeSet<u64> = told.iter().map(|t| t.0).collect();
    assert_eq!(places.len(), N, "every browser has its own place");
    let positions: Vec<u64> = told.iter().map(|t| t.1).collect();
    assert_eq!(positions, (1..=N as u64).collect::<Vec<_>>());
    assert_eq!(stack.queue("together").await?["waiting"], N as u64);
    assert!(
        (calls as usize) < N,
        "{N} joins arriving together took {calls} join calls"
    );
    Ok(())
}
