//! Faults on a real Redis Cluster while a queue drains: its master killed (its replica takes
//! over), and its slot migrated to another master. Each browser must be admitted exactly once
//! with a token of its own; the figures (failover gap, admissions replayed) are printed for
//! BENCHMARKS.md, never asserted.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::json;
use usher_core::ids::QueueId;
use usher_core::keys::{hash_slot, QueueKeys};
use usher_testkit::line::PAUSED;
use usher_testkit::line::{data, join_watch, jwks_at, place_of, verify_token};
use usher_testkit::sse::Watcher;
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::wait::{eventually_within, Seen};
use usher_testkit::{RedisCluster, SseClient};

/// Browsers in the draining line.
const N: usize = 40;

type Line = Vec<(String, u64, Watcher)>;

/// A cluster stack with `queue` holding N browsers, then draining at `rate` per second.
async fn draining(queue: &str, rate: f64) -> anyhow::Result<(Stack<RedisCluster>, Line)> {
    let stack = Stack::<RedisCluster>::launch(StackOptions::default()).await?;
    stack.create_queue(queue, PAUSED).await?;
    let client = SseClient::new(stack.gateway_url(0));
    let mut line = Vec::with_capacity(N);
    for _ in 0..N {
        line.push(join_watch(&client, queue).await?);
    }
    stack
        .put_queue(queue, json!({"admit_per_second": rate}))
        .await?;
    Ok((stack, line))
}

fn admitted(line: &Line) -> usize {
    line.iter()
        .filter(|(_, _, w)| w.last("admitted").is_some())
        .count()
}

/// Every browser got exactly one `admitted`, for its own place, with a token the JWKS
/// verifies; no two browsers share a token.
async fn each_admitted_once(
    stack: &Stack<RedisCluster>,
    queue: &str,
    line: &Line,
) -> anyhow::Result<()> {
    let jwks = jwks_at(&stack.http, &stack.dispatcher.url()).await?;
    let mut tokens = HashSet::new();
    for (ticket, _, w) in line {
        let all = w.all("admitted");
        assert_eq!(all.len(), 1, "{ticket}: exactly one admission");
        let token = data(&all[0])["token"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let claims = verify_token(&jwks, &token, queue)?;
        assert_eq!(claims["sub"], place_of(ticket).to_string());
        assert!(tokens.insert(token), "{ticket}: a token of its own");
    }
    Ok(())
}

/// The master holding `queue` is killed mid-drain. The cluster promotes its replica; the
/// client finds the new master by itself, and the drain goes on. What the replica had not
/// received when the master died (asynchronous replication) can be replayed: an admission
/// made just before the kill may be made again, which the queue's `admitted_total` shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_mid_drain_hands_over_to_its_replica() -> anyhow::Result<()> {
    let (mut stack, line) = draining("failover", 10.0).await?;
    eventually_within("five admissions", Duration::from_secs(10), async || {
        admitted(&line) >= 5
    })
    .await?;
    let meta = QueueKeys::new(&QueueId::new("failover")?).meta;
    let old = stack.redis.master_port_of(&meta)?;
    let at_kill = admitted(&line);
    let killed = Instant::now();
    stack.redis.master_of(&meta)?.kill();

    // The replica is promoted (cluster-node-timeout 1 s, then the election).
    let promoted = eventually_within(
        "a replica to take the slot over",
        Duration::from_secs(30),
        async || {
            let now = tokio::task::block_in_place(|| stack.redis.master_port_of(&meta));
            match now {
                Ok(port) if port != old => Ok(killed.elapsed()),
                other => Err(Seen(other.map_err(|e| e.to_string()))),
            }
        },
    )
    .await?;
    // Admission resumes by itself, and everyone is let in.
    let mut resumed = None;
    eventually_within(
        "everyone admitted after the failover",
        Duration::from_secs(60),
        async || {
            let n = admitted(&line);
            if resumed.is_none() && n > at_kill + 1 {
                resumed = Some(killed.elapsed());
            }
            if n == N {
                Ok(())
            } else {
                Err(format!("{n} of {N} admitted"))
            }
        },
    )
    .await?;
    each_admitted_once(&stack, "failover", &line).await?;
    let q = stack.queue("failover").await?;
    let total = q["admitted_total"].as_u64().unwrap_or(0);
    assert!(total >= N as u64, "every admission counted: {q}");
    eprintln!(
        "failover: replica promoted after {promoted:?}, admissions resumed after {resumed:?}; \
         admitted_total {total} for {N} places ({} replayed)",
        total - N as u64
    );
    Ok(())
}

/// The slot of a draining queue moves to another master in small batches (as `redis-cli
/// --cluster reshard` does), so scripts meet it half moved (`ASK`, `TRYAGAIN`). `MIGRATE` is
/// synchronous: nothing may be lost or repeated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_queue_slot_migrates_mid_drain_without_loss_or_duplicates() -> anyhow::Result<()> {
    // 4/s: the drain lasts about 10 s, longer than the migration's many redis-cli calls take
    // on a loaded machine, so the slot surely moves mid-drain.
    let (stack, line) = draining("moving", 4.0).await?;
    eventually_within("five admissions", Duration::from_secs(10), async || {
        admitted(&line) >= 5
    })
    .await?;
    let meta = QueueKeys::new(&QueueId::new("moving")?).meta;
    let slot = hash_slot(&meta);
    let from = stack.redis.master_port_of(&meta)?;
    let to = stack
        .redis
        .master_ports()?
        .into_iter()
        .find(|p| *p != from)
        .expect("another master");
    let moved = tokio::task::block_in_place(|| {
        stack
            .redis
            .migrate_slot(slot, from, to, 2, Duration::from_millis(100))
    })?;
    assert!(moved >= 5, "the queue's keys moved: {moved}");
    assert_eq!(stack.redis.master_port_of(&meta)?, to);
    assert!(
        admitted(&line) < N,
        "the drain was still going while the slot moved"
    );
    eventually_within(
        "the whole line admitted",
        Duration::from_secs(30),
        async || {
            if admitted(&line) == N {
                Ok(())
            } else {
                Err(format!(
                    "{} of {N} admitted after the migration",
                    admitted(&line)
                ))
            }
        },
    )
    .await?;
    each_admitted_once(&stack, "moving", &line).await?;
    let q = stack.queue("moving").await?;
    assert_eq!(
        q["admitted_total"], N as u64,
        "no admission lost or repeated: {q}"
    );
    assert_eq!(q["waiting"], 0);
    Ok(())
}
