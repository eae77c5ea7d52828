//! `usher-bench-shards`: the Redis side of many queues at once, on one `redis-server` and on a
//! Redis Cluster of three masters (no replicas), each started here on loopback and stopped at
//! the end. For each layout it creates `--queues` queues, then measures:
//!
//! * joins/s: `--clients` concurrent callers run the join script (`--join-batch` places per
//!   call, as a gateway batches a burst of joins per queue), spread round-robin over the
//!   queues, for `--seconds`;
//! * admissions/s: the queues, filled up to `--line` places each, are ticked together for
//!   `--seconds` (one tick round = every queue's tick script calls at one admission time,
//!   1,000 admissions per call, up to `--admit-per-tick` per queue), as the dispatcher
//!   replicas holding them would.
//!
//! Only usher's scripts and Redis are measured: no gateway, no HTTP, no token signing (the
//! dispatcher's signing bounds admissions first; docs/deploying.md, "Sizing Redis"). The caller runs on the
//! same machine as the servers: on a machine with fewer cores than masters the cluster
//! shares the cores, so the figures compare layouts on this machine only.
//! Prints one JSON object. Used by `make bench` (scripts/bench.sh, scenario `shards`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use futures::stream::{self, StreamExt};
use usher_core::ids::QueueId;
use usher_core::store::{Joined, QueueConfig, RedisArgs, Store, Tick, JOIN_BATCH_MAX};
use usher_core::time::now_ms;
use usher_testkit::{RedisCluster, RedisServer};

/// Joins/s and admissions/s with many queues, on one Redis and on a 3-master cluster.
#[derive(Debug, Parser)]
#[command(name = "usher-bench-shards", version, about, long_about)]
struct Args {
    /// Layouts to measure, comma separated: `single` (one redis-server), `cluster` (three
    /// masters, no replicas).
    #[arg(
        long,
        env = "USHER_BENCH_LAYOUTS",
        value_delimiter = ',',
        default_value = "single,cluster"
    )]
    layouts: Vec<Layout>,

    /// Queues per layout (each its own hash tag, so spread over the masters).
    #[arg(long, env = "USHER_BENCH_QUEUES", default_value_t = 24)]
    queues: usize,

    /// Concurrent callers of the join script.
    #[arg(long, env = "USHER_BENCH_CLIENTS", default_value_t = 48)]
    clients: usize,

    /// Places per join call.
    #[arg(long, env = "USHER_BENCH_JOIN_BATCH", default_value_t = 16)]
    join_batch: usize,

    /// Seconds each phase (joins, then admissions) runs.
    #[arg(long, env = "USHER_BENCH_SECONDS", default_value_t = 10)]
    seconds: u64,

    /// Places admitted per queue per tick round (one script call per 1,000).
    #[arg(long, env = "USHER_BENCH_ADMIT_PER_TICK", default_value_t = 1000)]
    admit_per_tick: u64,

    /// Places each queue's line is filled up to (untimed) before the admissions phase, so no
    /// line runs dry during it; the phase also ends when every line is empty.
    #[arg(long, env = "USHER_BENCH_LINE", default_value_t = 40_000)]
    line: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Layout {
    /// One redis-server.
    Single,
    /// Redis Cluster: three masters, no replicas.
    Cluster,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Self::Single => "single",
            Self::Cluster => "cluster",
        }
    }

    fn masters(self) -> u32 {
        match self {
            Self::Single => 1,
            Self::Cluster => 3,
        }
    }
}

/// The servers of one layout; stopped when dropped.
enum Servers {
    Single(RedisServer),
    Cluster(RedisCluster),
}

impl Servers {
    fn start(layout: Layout) -> anyhow::Result<Self> {
        // No persistence: the figures are the scripts' and Redis' CPU, not the disk's.
        let plain = ["--save", "", "--appendonly", "no"];
        Ok(match layout {
            Layout::Single => Self::Single(RedisServer::start_with(&plain)?),
            Layout::Cluster => Self::Cluster(RedisCluster::start_shaped(3, 0, &plain)?),
        })
    }

    fn redis_args(&self) -> RedisArgs {
        match self {
            Self::Single(s) => RedisArgs::standalone(s.url()),
            Self::Cluster(c) => c.redis_args(),
        }
    }

    /// The process ids of the servers, for their CPU time.
    fn pids(&self) -> Vec<u32> {
        match self {
            Self::Single(s) => vec![s.pid()],
            Self::Cluster(c) => c.nodes.iter().map(RedisServer::pid).collect(),
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.queues > 0 && args.clients > 0 && args.join_batch > 0);
    let mut results = Vec::new();
    for &layout in &args.layouts {
        let servers = tokio::task::block_in_place(|| Servers::start(layout))
            .with_context(|| format!("starting the {layout:?} layout"))?;
        let store = Store::open(&servers.redis_args()).await?;
        results.push(measure(layout, &servers, &store, &args).await?);
    }
    println!(
        "{}",
        serde_json::json!({
            "queues": args.queues,
            "clients": args.clients,
            "join_batch": args.join_batch,
            "seconds": args.seconds,
            "admit_per_tick": args.admit_per_tick,
            "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            "results": results,
        })
    );
    Ok(())
}

async fn measure(
    layout: Layout,
    servers: &Servers,
    store: &Store,
    args: &Args,
) -> anyhow::Result<serde_json::Value> {
    let queues: Vec<QueueId> = (0..args.queues)
        .map(|i| QueueId::new(format!("shard-bench-{i}")))
        .collect::<Result<_, _>>()?;
    let paused = QueueConfig {
        admit_per_second: args.admit_per_tick as f64 * 10.0,
        paused: true,
        passthrough: false,
        ..QueueConfig::default()
    };
    for q in &queues {
        store.put_queue(q, &paused).await?;
    }
    let phase = Duration::from_secs(args.seconds);

    // Joins: every client calls the join script back to back until the phase ends.
    let joined = Arc::new(AtomicU64::new(0));
    let cpu0 = cpu_ticks(&servers.pids());
    let start = Instant::now();
    let clients = (0..args.clients).map(|c| {
        let (store, queues, joined) = (store.clone(), queues.clone(), joined.clone());
        let batch = args.join_batch;
        async move {
            let mut k = c;
            while start.elapsed() < phase {
                let q = &queues[k % queues.len()];
                // The client's next call goes to the next queue (another slot).
                k += 1;
                match store
                    .join_many(q, (k % 6 + 1) as u16, now_ms(), batch)
                    .await
                {
                    Ok(Joined::Places { count, .. }) => {
                        joined.fetch_add(count, Ordering::Relaxed);
                    }
                    Ok(other) => anyhow::bail!("join did not take places: {other:?}"),
                    Err(e) => return Err(e.into()),
                }
            }
            Ok(())
        }
    });
    let outcomes: Vec<anyhow::Result<()>> = stream::iter(clients)
        .buffer_unordered(args.clients)
        .collect()
        .await;
    outcomes.into_iter().collect::<anyhow::Result<()>>()?;
    let join_secs = start.elapsed().as_secs_f64();
    let join_cpu = cpu_ticks(&servers.pids()).saturating_sub(cpu0);
    let joined = joined.load(Ordering::Relaxed);

    // Admissions: rounds of every queue's tick at one admission time, 100 ms apart in
    // admission time (so each round's budget is `admit_per_tick` per queue), run back to back.
    for q in &queues {
        let waiting = store.queue_stats(q, now_ms()).await?.waiting;
        let mut missing = args.line.saturating_sub(waiting);
        while missing > 0 {
            let n = missing.min(JOIN_BATCH_MAX as u64);
            store.join_many(q, 1, now_ms(), n as usize).await?;
            missing -= n;
        }
    }
    let mut leases = Vec::new();
    let open = QueueConfig {
        paused: false,
        ..paused.clone()
    };
    for q in &queues {
        store.put_queue(q, &open).await?;
        let lease = store
            .acquire_lease(q, "bench", Duration::from_secs(600))
            .await?
            .context("lease")?;
        leases.push(lease);
    }
    let (mut admitted, mut dropped, mut rounds) = (0u64, 0u64, 0u64);
    let cpu0 = cpu_ticks(&servers.pids());
    let base = now_ms();
    let start = Instant::now();
    let mut busy = true;
    while busy && start.elapsed() < phase {
        rounds += 1;
        busy = false;
        let at = base + 100 * rounds;
        let ticks: Vec<_> = stream::iter(queues.iter().zip(&leases))
            .map(|(q, lease)| async move {
                usher_testkit::tick_calls(store, q, &usher_testkit::tick_args(lease, at)).await
            })
            .buffer_unordered(queues.len())
            .collect()
            .await;
        for calls in ticks {
            for t in calls? {
                let Tick::Ticked(o) = t else {
                    anyhow::bail!("a queue did not tick (closed, or its lease lost)");
                };
                admitted += o.admitted;
                dropped += o.dropped;
                busy |= o.admitted > 0;
            }
        }
    }
    let admit_secs = start.elapsed().as_secs_f64();
    let admit_cpu = cpu_ticks(&servers.pids()).saturating_sub(cpu0);
    Ok(serde_json::json!({
        "layout": layout.name(),
        "masters": layout.masters(),
        "joins": joined,
        "joins_per_second": joined as f64 / join_secs,
        "join_redis_cpu_seconds": join_cpu as f64 / 100.0,
        "admitted": admitted,
        "dropped": dropped,
        "tick_rounds": rounds,
        "admissions_per_second": admitted as f64 / admit_secs,
        "admit_redis_cpu_seconds": admit_cpu as f64 / 100.0,
        "seconds": [join_secs, admit_secs],
    }))
}

/// CPU time (user + system, in 1/100 s) the processes `pids` have used so far.
fn cpu_ticks(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            // After the command name in parentheses: fields 14 and 15 (utime, stime).
            let rest = stat.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .sum()
}
