//! Fault injection on real processes: dispatchers killed, gateways killed and drained, Redis
//! restarted — nobody loses a place, nobody is admitted twice, order is kept.
//!
//! Every test prints a `FAULT ...` line with its figures (recorded in BENCHMARKS.md).

use std::collections::HashSet;

use anyhow::Context;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use usher_testkit::browser::{Browser, Seen};
use usher_testkit::line::token_payload;
use usher_testkit::procs::Proc;
use usher_testkit::wait::{eventually, eventually_within};
use usher_testkit::{RedisServer, SseClient};

const TICKET_KEY: &str = "fault-test-ticket-key-0123456789abcdef";

struct Cluster {
    redis: RedisServer,
    dispatchers: Vec<Proc>,
    gateways: Vec<Proc>,
    http: reqwest::Client,
}

impl Cluster {
    async fn start(
        dispatchers: usize,
        gateways: usize,
        redis_args: &[&str],
    ) -> anyhow::Result<Self> {
        usher_testkit::stack::init_logs();
        let redis = RedisServer::start_with(redis_args)?;
        let common = |extra: &[(&'static str, String)]| {
            let mut env = vec![
                ("USHER_REDIS_URL", redis.url()),
                ("USHER_TICK_MS", "100".to_owned()),
                ("USHER_LEASE_TTL_MS", "500".to_owned()),
                ("USHER_HEARTBEAT_MS", "200".to_owned()),
                ("USHER_RETRY_MS", "300".to_owned()),
                ("USHER_DRAIN_SECS", "2".to_owned()),
                ("USHER_DRAIN_DELAY_MS", "200".to_owned()),
                ("USHER_TICKET_KEY", TICKET_KEY.to_owned()),
            ];
            env.extend(extra.iter().cloned());
            env
        };
        let mut ds = Vec::new();
        // Replica ids are random per process (the default), so a restarted replica is a new
        // one and the survivor has to take its queues over.
        for _ in 0..dispatchers {
            ds.push(Proc::start("usher-dispatcher", &common(&[])).await?);
        }
        let mut gs = Vec::new();
        for i in 0..gateways {
            let id = format!("g{i}");
            // The browsers all come from 127.0.0.1: `Proc` turns the per-IP limits off.
            let env = vec![("USHER_SERVER_ID", id)];
            gs.push(Proc::start("usher-gateway", &common(&env)).await?);
        }
        Ok(Self {
            redis,
            dispatchers: ds,
            gateways: gs,
            http: usher_testkit::config::admin_client(),
        })
    }

    fn clients(&self) -> Vec<SseClient> {
        self.gateways
            .iter()
            .map(|g| SseClient::new(g.url()))
            .collect()
    }

    /// `PUT /admin/queues/{q}` on whichever dispatcher answers.
    async fn put_queue(&self, q: &str, body: Value) -> anyhow::Result<()> {
        let what = format!("a dispatcher to accept PUT /admin/queues/{q}");
        eventually(&what, async || {
            for d in &self.dispatchers {
                let r = self
                    .http
                    .put(format!("{}/admin/queues/{q}", d.url()))
                    .json(&body)
                    .timeout(Duration::from_secs(2))
                    .send()
                    .await;
                if r.is_ok_and(|r| r.status().is_success()) {
                    return true;
                }
            }
            false
        })
        .await
    }

    /// Queue `q`'s stats from the first dispatcher that gives them; else an error saying what
    /// each one answered.
    async fn stats(&self, q: &str) -> anyhow::Result<Value> {
        let mut answers = Vec::new();
        for d in &self.dispatchers {
            let url = format!("{}/admin/queues/{q}", d.url());
            match self.http.get(&url).send().await {
                Ok(r) if r.status().is_success() => return Ok(r.json().await?),
                Ok(r) => {
                    let status = r.status();
                    let body = r.text().await.unwrap_or_default();
                    answers.push(format!("{url}: {status} {body}"));
                }
                Err(e) => answers.push(format!("{url}: {e}")),
            }
        }
        anyhow::bail!("no dispatcher answered: {}", answers.join("; "))
    }
}

/// Starts `n` browsers, `first(i)` choosing each one's first gateway, and waits until each
/// holds a place. Returns them in join order.
async fn join_all(
    c: &Cluster,
    q: &str,
    n: usize,
    first: impl Fn(usize) -> usize,
) -> anyhow::Result<Vec<Browser>> {
    let clients = c.clients();
    let mut bs = Vec::with_capacity(n);
    for i in 0..n {
        bs.push(Browser::spawn(
            clients.clone(),
            q,
            first(i),
            Duration::from_secs(180),
        ));
    }
    eventually_within(
        "every browser gets a place",
        Duration::from_secs(60),
        async || bs.iter().all(|b| !b.seen().positions.is_empty()),
    )
    .await?;
    Ok(bs)
}

fn ms(rfc3339: &str) -> u64 {
    usher_core::time::parse_rfc3339_ms(rfc3339).unwrap_or(0)
}

/// What the browsers saw, checked: everyone admitted exactly once with their own unique token,
/// in FIFO order. Returns (admitted, lost, duplicated, largest gap between admissions ms).
fn check_admissions(q: &str, seen: &[Seen]) -> (usize, usize, usize, u64) {
    let mut tokens = HashSet::new();
    let mut duplicated = 0;
    let mut lost = 0;
    let mut order: Vec<(u64, u64)> = Vec::new();
    for s in seen {
        assert_eq!(s.gave_up, None, "no browser is turned away: {s:?}");
        assert!(
            s.closed.is_empty(),
            "no browser sees closed: {:?}",
            s.closed
        );
        match s.admitted.len() {
            0 => lost += 1,
            1 => {}
            _ => duplicated += s.admitted.len() - 1,
        }
        let Some(a) = s.admitted.first() else {
            continue;
        };
        let token = a["token"].as_str().unwrap_or_default().to_owned();
        let c = token_payload(&token).unwrap_or(Value::Null);
        assert_eq!(c["aud"], q);
        assert_eq!(
            c["sub"].as_str().and_then(|x| x.parse::<u64>().ok()),
            s.place(),
            "the token names the browser's own place"
        );
        if !tokens.insert(token) {
            duplicated += 1;
        }
        order.push((
            s.place().unwrap_or(0),
            ms(a["admitted_at"].as_str().unwrap_or_default()),
        ));
    }
    order.sort();
    let fifo_violations = order.windows(2).filter(|w| w[1].1 < w[0].1).count();
    assert_eq!(fifo_violations, 0, "admitted in join order");
    let mut times: Vec<u64> = order.iter().map(|o| o.1).collect();
    times.sort_unstable();
    let gap = times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    (seen.len() - lost, lost, duplicated, gap)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_dispatchers_twenty_times_loses_and_duplicates_no_admission() -> anyhow::Result<()>
{
    let _solo = usher_testkit::solo().await; // heavy
    const N: usize = 2000;
    let mut c = Cluster::start(2, 2, &["--save", "", "--appendonly", "no"]).await?;
    c.put_queue("kills", json!({"admit_per_second": 100, "paused": true}))
        .await?;
    let bs = join_all(&c, "kills", N, |i| i % 2).await?;
    let started = Instant::now();
    c.put_queue("kills", json!({"paused": false})).await?;
    let mut kills = 0;
    while kills < 20 {
        // The scenario: a kill each time the line has moved again since the last one (the
        // replica that drove it was busy), until 20 kills or the line is drained.
        let moved = bs.iter().filter(|b| !b.seen().admitted.is_empty()).count();
        if moved < N {
            let _ = eventually("the line to move before the next kill", async || {
                bs.iter().filter(|b| !b.seen().admitted.is_empty()).count() > moved
            })
            .await;
        }
        let victim = kills % 2;
        c.dispatchers[victim].restart().await?; // SIGKILL, then start again
        kills += 1;
    }
    let done = eventually_within(
        "every browser finishes",
        Duration::from_secs(90),
        async || bs.iter().all(|b| b.is_done()),
    )
    .await;
    let seen: Vec<Seen> = bs.iter().map(Browser::seen).collect();
    let (admitted, lost, duplicated, gap) = check_admissions("kills", &seen);
    let stats = c.stats("kills").await?;
    println!(
        "FAULT dispatcher-kill9: waiters={N} replicas=2 kills={kills} admitted={admitted} lost={lost} \
         duplicated={duplicated} admitted_total={} longest_admission_gap_ms={gap} drained_in_s={:.1}",
        stats["admitted_total"],
        started.elapsed().as_secs_f64()
    );
    done?;
    assert_eq!((lost, duplicated), (0, 0));
    assert_eq!(
        stats["admitted_total"], N as u64,
        "no place admitted twice in redis"
    );
    Ok(())
}

/// Joins 1,000 browsers on gateway 0 (reconnecting to gateway 1), applies `fault` to gateway
/// 0, and checks every browser resumed its exact place on gateway 1 and is then admitted in
/// order. Returns (resumed, recovery time).
async fn gateway_fault(
    name: &str,
    fault: impl FnOnce(&mut Proc) -> anyhow::Result<()>,
) -> anyhow::Result<(usize, Duration, Cluster)> {
    const N: usize = 1000;
    let mut c = Cluster::start(1, 2, &["--save", "", "--appendonly", "no"]).await?;
    c.put_queue(name, json!({"admit_per_second": 400, "paused": true}))
        .await?;
    let bs = join_all(&c, name, N, |_| 0).await?;
    let before: Vec<u64> = bs
        .iter()
        .map(|b| b.seen().positions.last().map(|p| p.1).unwrap_or(0))
        .collect();
    let at = Instant::now();
    fault(&mut c.gateways[0])?;
    let resumed = |b: &Browser| {
        let s = b.seen();
        s.connects >= 2 && s.positions.last().is_some_and(|p| p.0 > at)
    };
    let all = eventually_within(
        "every browser resumes",
        Duration::from_secs(30),
        async || bs.iter().all(resumed),
    )
    .await
    .is_ok();
    let recovery = bs
        .iter()
        .filter_map(|b| b.seen().positions.last().map(|p| p.0.duration_since(at)))
        .max()
        .unwrap_or_default();
    let n_resumed = bs.iter().filter(|b| resumed(b)).count();
    assert!(all, "{n_resumed} of {N} resumed");
    for (b, pos) in bs.iter().zip(&before) {
        let s = b.seen();
        assert_eq!(
            s.positions.last().map(|p| p.1),
            Some(*pos),
            "same place after reconnecting"
        );
        assert_eq!(s.gave_up, None);
    }
    assert_eq!(
        c.stats(name).await?["waiting"],
        N as u64,
        "no place lost or added"
    );
    c.put_queue(name, json!({"paused": false})).await?;
    eventually_within(
        "every browser finishes",
        Duration::from_secs(30),
        async || bs.iter().all(|b| b.is_done()),
    )
    .await?;
    let seen: Vec<Seen> = bs.iter().map(Browser::seen).collect();
    let (admitted, lost, duplicated, _) = check_admissions(name, &seen);
    assert_eq!((admitted, lost, duplicated), (N, 0, 0));
    Ok((n_resumed, recovery, c))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_gateways_browsers_resume_their_places_on_another() -> anyhow::Result<()> {
    let _solo = usher_testkit::solo().await; // heavy
    let (resumed, recovery, c) = gateway_fault("gwkill", |g| {
        g.kill9();
        Ok(())
    })
    .await?;
    // The dead gateway's registry entry and stream expire by themselves (stream: 30 heartbeats).
    let mut redis = redis::Client::open(c.redis.url())?
        .get_multiplexed_async_connection()
        .await?;
    let dead_stream = usher_core::keys::gateway_stream(&"g0".parse()?);
    // A figure, printed: whether the stream expired within 10 s.
    let gone = eventually_within(
        "the dead gateway's stream to expire",
        Duration::from_secs(10),
        async || {
            let n: i64 = redis::cmd("EXISTS")
                .arg(&dead_stream)
                .query_async(&mut redis)
                .await?;
            anyhow::ensure!(n == 0, "still there");
            Ok(())
        },
    )
    .await
    .is_ok();
    println!(
        "FAULT gateway-kill9: browsers=1000 resumed={resumed} lost=0 duplicated=0 recovery_ms={} dead_stream_expired={gone}",
        recovery.as_millis()
    );
    assert!(gone, "the dead gateway's stream expires");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_gateways_browsers_resume_elsewhere_within_the_drain_window() -> anyhow::Result<()>
{
    let _solo = usher_testkit::solo().await; // heavy
    let (resumed, recovery, mut c) = gateway_fault("gwterm", |g| g.term()).await?;
    // Drain delay 0.2 s + window 2 s + hard margin 5 s: it must have exited cleanly by then.
    let exited_cleanly = c.gateways[0].wait_exit(Duration::from_secs(8)).await?;
    println!(
        "FAULT gateway-sigterm: browsers=1000 resumed={resumed} lost=0 recovery_ms={} drain_window_ms=2000 exited_cleanly={exited_cleanly}",
        recovery.as_millis()
    );
    assert!(exited_cleanly, "the drained gateway exits with success");
    // Drain delay (0.2 s) + drain window (2 s) + the browsers' jittered retry (<= 0.45 s),
    // and 3 s for 1,000 resumes on a debug gateway sharing a loaded machine with this test.
    assert!(
        recovery < Duration::from_millis(2200 + 450 + 3000),
        "resumed within the drain window: {recovery:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarting_redis_with_aof_mid_drain_loses_and_duplicates_nothing() -> anyhow::Result<()> {
    let _solo = usher_testkit::solo().await; // heavy
    const N: usize = 2000;
    let mut c = Cluster::start(
        1,
        2,
        &[
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
        ],
    )
    .await?;
    c.put_queue("aof", json!({"admit_per_second": 200, "paused": true}))
        .await?;
    let bs = join_all(&c, "aof", N, |i| i % 2).await?;
    c.put_queue("aof", json!({"paused": false})).await?;
    // Redis goes down mid-drain: once 30% of the line is through (3 s at 200/s).
    eventually_within(
        "30% of the line admitted",
        Duration::from_secs(30),
        async || bs.iter().filter(|b| !b.seen().admitted.is_empty()).count() >= N * 3 / 10,
    )
    .await?;
    let down = Instant::now();
    c.redis.stop_graceful()?;
    // The outage lasts until every dispatcher has felt it (a Redis call failed).
    for d in &c.dispatchers {
        usher_testkit::line::counter_grows(&d.url(), "usher_redis_errors_total", 1).await?;
    }
    c.redis.start_again()?;
    let outage = down.elapsed();
    let done = eventually_within(
        "every browser finishes",
        Duration::from_secs(60),
        async || bs.iter().all(|b| b.is_done()),
    )
    .await;
    let seen: Vec<Seen> = bs.iter().map(Browser::seen).collect();
    let (admitted, lost, duplicated, gap) = check_admissions("aof", &seen);
    let stats = c.stats("aof").await;
    let mut restarted = 0;
    for p in c.dispatchers.iter_mut().chain(c.gateways.iter_mut()) {
        if p.wait_exit(Duration::ZERO).await.is_ok() {
            restarted += 1;
        }
    }
    println!(
        "FAULT redis-restart-aof: waiters={N} outage_ms={} admitted={admitted} lost={lost} duplicated={duplicated} \
         admitted_total={} longest_admission_gap_ms={gap} components_restarted={restarted}",
        outage.as_millis(),
        stats
            .as_ref()
            .map_or_else(|e| format!("? ({e})"), |s| s["admitted_total"].to_string())
    );
    // Browsers that did not finish are the failure to report first: stats read after it may
    // fail for the same reason.
    done?;
    assert_eq!((lost, duplicated, restarted), (0, 0, 0));
    assert_eq!(stats?["admitted_total"], N as u64);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_dispatcher_hands_its_queues_over_at_once() -> anyhow::Result<()> {
    let _solo = usher_testkit::solo().await; // heavy
    let redis = RedisServer::start()?;
    // A long lease, so a hand-over that waited for expiry would show.
    let env = |id: &str| {
        vec![
            ("USHER_REDIS_URL", redis.url()),
            ("USHER_TICK_MS", "100".to_owned()),
            ("USHER_LEASE_TTL_MS", "5000".to_owned()),
            ("USHER_REPLICA_ID", id.to_owned()),
        ]
    };
    let mut d = [
        Proc::start("usher-dispatcher", &env("d0")).await?,
        Proc::start("usher-dispatcher", &env("d1")).await?,
    ];
    let http = usher_testkit::config::admin_client();
    http.put(format!("{}/admin/queues/handover", d[0].url()))
        .json(&json!({"admit_per_second": 10}))
        .send()
        .await?
        .error_for_status()?;
    let mut conn = redis::Client::open(redis.url())?
        .get_multiplexed_async_connection()
        .await?;
    let lease_key = usher_core::keys::QueueKeys::new(&"handover".parse()?).lease;
    let owner = eventually_within(
        "a replica to take the lease",
        Duration::from_secs(30),
        async || {
            let lease: Option<String> = redis::cmd("GET")
                .arg(&lease_key)
                .query_async(&mut conn)
                .await
                .ok()?;
            lease.map(|l| l.split('|').next().unwrap_or_default().to_owned())
        },
    )
    .await?;
    let leader = match owner.as_str() {
        "d0" => 0,
        "d1" => 1,
        other => anyhow::bail!("unexpected lease owner {other:?}"),
    };
    let stopped = Instant::now();
    d[leader].term()?;
    let clean = d[leader].wait_exit(Duration::from_secs(10)).await?;
    // Measured, then checked below: `None` when the other replica did not take over in time.
    let took_over = eventually_within(
        "the other replica to take the lease",
        Duration::from_secs(4),
        async || {
            let lease: Option<String> = redis::cmd("GET")
                .arg(&lease_key)
                .query_async(&mut conn)
                .await
                .ok()?;
            lease
                .is_some_and(|l| l.starts_with(if leader == 0 { "d1|" } else { "d0|" }))
                .then(|| stopped.elapsed())
        },
    )
    .await
    .ok();
    println!(
        "FAULT dispatcher-sigterm: lease_ttl_ms=5000 takeover_ms={:?} exited_cleanly={clean}",
        took_over.map(|t| t.as_millis())
    );
    assert!(clean, "the dispatcher exits cleanly on SIGTERM");
    let took_over = took_over.context("the other replica took the queue over")?;
    // Released at once: far sooner than the 5 s lease would take to expire (the survivor's
    // registry entry must first show the leaver gone: one tick plus its heartbeat).
    assert!(took_over < Duration::from_millis(2500), "{took_over:?}");
    Ok(())
}
