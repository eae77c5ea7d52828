//! `max_active`: never more active sessions than the cap, whatever joins, releases, expiries,
//! replicas and lease hand-overs do; a freed slot is refilled at the next tick.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use usher_testkit::line::{data, T};
use usher_testkit::procs::Proc;
use usher_testkit::sse::Watcher;
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::wait::{eventually, eventually_within};
use usher_testkit::{RedisProbe, RedisServer, SseClient};

const TICK_MS: u64 = 200;

/// `DELETE /api/session` with `token` on the dispatcher at `base`.
async fn release(http: &reqwest::Client, base: &str, token: &str) -> anyhow::Result<u16> {
    Ok(http
        .delete(format!("{base}/api/session"))
        .bearer_auth(token)
        .send()
        .await?
        .status()
        .as_u16())
}

fn admitted_token(w: &Watcher) -> Option<(String, String)> {
    w.last("admitted").map(|e| {
        let d = data(&e);
        (
            d["token"].as_str().unwrap_or_default().to_owned(),
            d["admitted_at"].as_str().unwrap_or_default().to_owned(),
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_with_releases_refills_freed_slots_within_one_tick() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions {
        tick_ms: TICK_MS,
        ..Default::default()
    })
    .await?;
    let v = stack
        .put_queue(
            "cap",
            json!({"admit_per_second": 100.0, "max_active": 3, "passthrough": false}),
        )
        .await?;
    assert_eq!(v["max_active"], 3);
    let client = SseClient::new(stack.gateway_url(0));
    let mut watchers = Vec::new();
    for _ in 0..8 {
        let (_t, _p, w) = usher_testkit::line::join_watch(&client, "cap").await?;
        watchers.push(w);
    }
    let admitted = |ws: &[Watcher]| ws.iter().filter(|w| w.last("admitted").is_some()).count();
    eventually("three admitted", async || admitted(&watchers) == 3).await?;
    // The rate would admit all eight at once: three ticks later, the cap holds it at three.
    RedisProbe::connect(&stack.redis.url())
        .await?
        .ticks(&usher_core::ids::QueueId::new("cap")?, 3)
        .await?;
    assert_eq!(admitted(&watchers), 3);
    let q = stack.queue("cap").await?;
    assert_eq!(
        (q["active"].as_u64(), q["waiting"].as_u64()),
        (Some(3), Some(5))
    );
    assert_eq!(q["rate_reason"], "capacity_full");
    assert_eq!(q["effective_per_second"], 0.0);

    let d = stack.dispatcher.url();
    let probe = usher_testkit::probe::RedisProbe::connect(&stack.redis.url()).await?;
    let queue = usher_core::ids::QueueId::new("cap")?;
    let mut ended = Vec::new();
    // An admitted place whose session this test has not ended yet.
    let active_one = |ws: &[Watcher], ended: &[usize]| {
        (0..ws.len()).find(|i| ws[*i].last("admitted").is_some() && !ended.contains(i))
    };
    for round in 0..3 {
        let i = active_one(&watchers, &ended).expect("an active session");
        ended.push(i);
        let (token, _) = admitted_token(&watchers[i]).expect("admitted");
        assert_eq!(release(&stack.http, &d, &token).await?, 204);
        // The refill comes from the first tick that runs after the release, on the
        // dispatcher's clock: that tick's time and admissions, read together.
        let want = 4 + round;
        let after = probe.next_tick(&queue, T).await?;
        assert_eq!(
            after.1, want as u64,
            "round {round}: the first tick after the release refilled the freed slot"
        );
        eventually("the refilled browser hears admitted", async || {
            admitted(&watchers) == want
        })
        .await?;
        let q = stack.queue("cap").await?;
        assert_eq!(q["active"], 3, "round {round}: {q}");
    }

    // A ticket DELETE of an admitted place ends its session too: the slot frees, and a
    // resume hears session_ended.
    let i = active_one(&watchers, &ended).expect("an active session");
    let ticket = watchers[i].last("admitted").expect("admitted").id;
    let r = stack
        .http
        .delete(format!(
            "{}/api/queues/cap/tickets/{ticket}",
            stack.gateway_url(0)
        ))
        .send()
        .await?;
    assert_eq!(r.status(), 204);
    eventually("seven admitted", async || admitted(&watchers) == 7).await?;
    let mut resumed = client.open("/api/queues/cap/stream", Some(&ticket)).await?;
    let closed = resumed.wait_for("closed", T).await?;
    assert_eq!(data(&closed)["reason"], "session_ended");
    Ok(())
}

/// Random joins, releases, ticket deletes and expiries (1 s sessions) against two dispatcher
/// replicas, killed and restarted so the queue is handed over; `active` is sampled all along
/// and never exceeds `max_active`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_never_exceeds_max_active_across_replicas_and_hand_overs() -> anyhow::Result<()> {
    let _solo = usher_testkit::solo().await; // kills replicas, samples
    const MAX_ACTIVE: u64 = 4;
    let redis = RedisServer::start()?;
    let env = |extra: &[(&'static str, String)]| {
        let mut e = vec![
            ("USHER_REDIS_URL", redis.url()),
            ("USHER_TICK_MS", "100".to_owned()),
            ("USHER_LEASE_TTL_MS", "400".to_owned()),
            ("USHER_HEARTBEAT_MS", "200".to_owned()),
            (
                "USHER_TICKET_KEY",
                "capacity-test-ticket-key-0123456789".to_owned(),
            ),
        ];
        e.extend(extra.iter().cloned());
        e
    };
    let mut ds = [
        Proc::start("usher-dispatcher", &env(&[])).await?,
        Proc::start("usher-dispatcher", &env(&[])).await?,
    ];
    let gw = Proc::start("usher-gateway", &env(&[])).await?;
    let http = usher_testkit::config::admin_client();
    let put = http
        .put(format!("{}/admin/queues/prop", ds[0].url()))
        .json(&json!({"admit_per_second": 40.0, "max_active": MAX_ACTIVE,
            "session_ttl_seconds": 1, "passthrough": true}))
        .send()
        .await?;
    assert!(put.status().is_success());

    // The sampler: `active` as the admin API counts it, as often as it answers. Each request
    // is short-lived: a killed replica's port may be taken by another test's server by now
    // (the light tests run beside this one), which may accept and never answer.
    let stop = Arc::new(AtomicBool::new(false));
    let worst = Arc::new(AtomicU64::new(0));
    let samples = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (stop, worst, samples) = (stop.clone(), worst.clone(), samples.clone());
        let urls: Vec<String> = ds.iter().map(|d| d.url()).collect();
        let http = http.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                for u in &urls {
                    let get = http.get(format!("{u}/admin/queues/prop"));
                    let Ok(r) = get.timeout(Duration::from_secs(2)).send().await else {
                        continue;
                    };
                    if let Ok(v) = r.json::<Value>().await {
                        let a = v["active"].as_u64().unwrap_or(0);
                        worst.fetch_max(a, Ordering::Relaxed);
                        samples.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };

    let seed: u64 = rand::random();
    println!("seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let client = SseClient::new(gw.url());
    let mut watchers: Vec<Watcher> = Vec::new();
    for step in 0..300 {
        match rng.gen_range(0..10) {
            0..=4 => {
                let conn = client.open("/api/queues/prop/stream", None).await?;
                watchers.push(Watcher::spawn(conn));
            }
            5..=6 => {
                // A booking service releases a random admitted session.
                if let Some((token, _)) = watchers
                    .iter()
                    .filter_map(admitted_token)
                    .nth(rng.gen_range(0..4))
                {
                    // On whichever replica answers (one of them may be down).
                    for d in &ds {
                        if release(&http, &d.url(), &token).await.is_ok() {
                            break;
                        }
                    }
                }
            }
            7 => {
                // A browser leaves with its ticket (waiting or admitted).
                if let Some(e) = watchers
                    .get(rng.gen_range(0..watchers.len().max(1)))
                    .and_then(|w| w.snapshot().first().cloned())
                {
                    let _ = http
                        .delete(format!("{}/api/queues/prop/tickets/{}", gw.url(), e.id))
                        .send()
                        .await?;
                }
            }
            _ => tokio::time::sleep(Duration::from_millis(rng.gen_range(20..200))).await,
        }
        // Lease hand-overs: while the first replica is down the second drives the queue;
        // the first comes back (a new replica id, maybe preferred now: a graceful hand-over),
        // then the second dies (if it still drove the queue: a crash hand-over). Either way
        // the queue changes hands at least once.
        match step {
            100 => ds[0].kill9(),
            180 => ds[0].restart().await?,
            250 => ds[1].kill9(),
            _ => {}
        }
    }
    // Let the last sessions expire (TTL 1 s) and slots churn a little longer: fifteen more
    // ticks (100 ms each) of the replica left driving the queue, for the sampler to watch.
    usher_testkit::line::counter_grows(&ds[0].url(), "usher_tick_duration_seconds_count", 15)
        .await?;
    // The sampler needs CPU to take its samples: on a starved machine, give it the time.
    eventually_within("the sampler ran", Duration::from_secs(60), async || {
        samples.load(Ordering::Relaxed) > 100
    })
    .await?;
    stop.store(true, Ordering::Relaxed);
    sampler.await?;
    let (worst, samples) = (
        worst.load(Ordering::Relaxed),
        samples.load(Ordering::Relaxed),
    );
    let admitted = watchers
        .iter()
        .filter(|w| w.last("admitted").is_some())
        .count();
    println!(
        "{samples} samples, worst active {worst}, {admitted} of {} admitted",
        watchers.len()
    );
    assert!(samples > 100, "the sampler ran: {samples}");
    assert!(
        admitted as u64 > MAX_ACTIVE,
        "slots were reused: {admitted} admitted"
    );
    assert!(
        worst <= MAX_ACTIVE,
        "active reached {worst} > max_active {MAX_ACTIVE}"
    );
    assert!(worst >= 1);
    drop(gw);
    Ok(())
}
