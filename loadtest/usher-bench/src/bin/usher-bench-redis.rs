//! `usher-bench-redis`: measures the Redis side of a waiting room with large lines, against a
//! `redis-server` it starts itself (or `--redis-url`): the memory a waiting place costs, and
//! how long one dispatcher tick takes (its script calls: one per 1,000 admissions) with a
//! short and with a very long line; with `--away`, how long a tick takes with that many away
//! places ahead of a short line, against the same short line alone (away places wait out of
//! the tick's way: issue 23); with `--draw-entrants`, how long a scheduled sale's draw of that
//! many entrants takes.
//! Prints one JSON object. Used by `make bench` (scripts/bench.sh).

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use futures::stream::{self, StreamExt};
use usher_core::draw::{EntrantHash, Seed};
use usher_core::ids::{PlaceId, QueueId};
use usher_core::store::{DrawOutcome, DrawPrep, Joined, QueueConfig, Store, Tick, JOIN_BATCH_MAX};
use usher_core::time::now_ms;
use usher_testkit::{RedisProbe, RedisServer};

/// Measures Redis memory per waiting place and dispatcher tick time against line length.
#[derive(Debug, Parser)]
#[command(name = "usher-bench-redis", version, about, long_about)]
struct Args {
    /// Redis to use; by default a fresh `redis-server` is started on a free port and stopped
    /// at the end. Its data is flushed: never point this at a Redis that matters.
    #[arg(long, env = "USHER_BENCH_REDIS_URL")]
    redis_url: Option<String>,

    /// Line lengths to measure, comma separated.
    #[arg(
        long,
        env = "USHER_BENCH_SIZES",
        value_delimiter = ',',
        default_value = "1000,1000000"
    )]
    sizes: Vec<u64>,

    /// Ticks timed per line length (the median and p99 are reported).
    #[arg(long, env = "USHER_BENCH_TICKS", default_value_t = 50)]
    ticks: u32,

    /// Places admitted per timed tick (one script call per 1,000; the tick's calls are timed
    /// together).
    #[arg(long, env = "USHER_BENCH_ADMIT_PER_TICK", default_value_t = 100)]
    admit_per_tick: u64,

    /// Away places (joined, then disconnected) ahead of a line of `--away-present` connected
    /// places: their tick is timed against the tick of the present places alone, and the
    /// Redis memory an away place costs is reported. 0 measures no wall.
    #[arg(long, env = "USHER_BENCH_AWAY", default_value_t = 0)]
    away: u64,

    /// Connected places behind the `--away` wall (and in the line it is compared with).
    #[arg(long, env = "USHER_BENCH_AWAY_PRESENT", default_value_t = 1000)]
    away_present: u64,

    /// Entrants of a scheduled sale's pre-queue whose draw is timed: reading the pre-queue,
    /// computing the order, the draw's script calls (each holds Redis while it runs; the
    /// longest single Redis call is reported) and reading the published record. 0 times no
    /// draw.
    #[arg(long, env = "USHER_BENCH_DRAW_ENTRANTS", default_value_t = 0)]
    draw_entrants: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (_own, url) =
        RedisServer::given_or_own(args.redis_url.as_deref()).context("starting redis-server")?;
    let store = Store::connect(&url).await?;
    let probe = RedisProbe::connect(&url).await?;
    let mut results = Vec::new();
    for &n in &args.sizes {
        results.push(measure(&store, &probe, n, 0, &args).await?);
    }
    let away = if args.away > 0 {
        let alone = measure(&store, &probe, args.away_present, 0, &args).await?;
        let wall = measure(&store, &probe, args.away_present, args.away, &args).await?;
        let p50 = |r: &serde_json::Value| r["tick_ms_p50"].as_f64().unwrap_or(f64::NAN);
        Some(serde_json::json!({
            "away": args.away,
            "present": args.away_present,
            "tick_ratio_p50": p50(&wall) / p50(&alone),
            "present_only": alone,
            "with_away": wall,
        }))
    } else {
        None
    };
    let draw = if args.draw_entrants > 0 {
        Some(measure_draw(&store, &probe, args.draw_entrants).await?)
    } else {
        None
    };
    println!(
        "{}",
        serde_json::json!({ "redis_url": url, "results": results, "away": away, "draw": draw })
    );
    Ok(())
}

/// Tick time with a line of `n` connected places, behind `away` places whose browsers
/// disconnected (kept for an hour: none expires during the measurement).
async fn measure(
    store: &Store,
    probe: &RedisProbe,
    n: u64,
    away: u64,
    args: &Args,
) -> anyhow::Result<serde_json::Value> {
    let q = QueueId::new(format!("bench-{n}-away-{away}"))?;
    // Paused while filling; admission per tick is set below.
    let mut cfg = QueueConfig {
        admit_per_second: 1.0,
        paused: true,
        grace_seconds: 3600,
        ..QueueConfig::default()
    };
    store.put_queue(&q, &cfg).await?;
    let away_bytes = if away > 0 {
        wall(store, probe, &q, away).await?
    } else {
        0
    };
    let fill = Instant::now();
    // In join calls of JOIN_BATCH_MAX places, as gateways send a burst of joins, each call
    // for one of six gateways in turn.
    let joined: u64 = stream::iter(batches(n))
        .map(|(k, len)| {
            let (store, q) = (store.clone(), q.clone());
            async move {
                let r = store.join_many(&q, (k % 6 + 1) as u16, now_ms(), len).await;
                if r.is_ok() {
                    len as u64
                } else {
                    0
                }
            }
        })
        .buffer_unordered(16)
        .fold(0, |sum, len| std::future::ready(sum + len))
        .await;
    anyhow::ensure!(joined == n, "only {joined} of {n} joins succeeded");
    let fill_secs = fill.elapsed().as_secs_f64();
    let bytes = probe.waiting_memory(&q).await?;

    let lease = store
        .acquire_lease(&q, "bench", Duration::from_secs(600))
        .await?
        .context("lease")?;
    // Admit `admit_per_tick` per tick of 100 ms.
    cfg.paused = false;
    cfg.admit_per_second = args.admit_per_tick as f64 * 10.0;
    store.put_queue(&q, &cfg).await?;
    let mut times = Vec::new();
    let mut admitted = 0;
    let mut samples = 0;
    let mut calls = 0;
    let start = now_ms();
    for k in 1..=u64::from(args.ticks) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Keep the line at `n`: replace what the previous tick admitted (not timed).
        let refill = (n + away).saturating_sub(store.queue_stats(&q, now_ms()).await?.waiting);
        for (k, len) in batches(refill) {
            store
                .join_many(&q, (k % 6 + 1) as u16, now_ms(), len)
                .await?;
        }
        // A whole tick: one script call per 1,000 admissions (`more`), at one admission time.
        // Admission times 100 ms apart, so each tick's budget is exactly `admit_per_tick`
        // however long the refill took.
        let tick_args = usher_testkit::tick_args(&lease, start + 100 * k);
        let t = Instant::now();
        let ticks = usher_testkit::tick_calls(store, &q, &tick_args).await?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        calls += ticks.len();
        for tick in ticks {
            let Tick::Ticked(o) = tick else {
                anyhow::bail!("the queue did not tick (closed, or its lease lost)");
            };
            admitted += o.admitted;
            if !o.more {
                samples = o.samples.len() + o.runs.len();
            }
        }
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| times[((times.len() as f64 - 1.0) * p).round() as usize];
    let mut row = serde_json::json!({
        "waiting": n,
        "fill_joins_per_second": n as f64 / fill_secs,
        "waiting_set_bytes": bytes,
        "bytes_per_place": bytes as f64 / n as f64,
        "tick_ms_p50": pct(0.5),
        "tick_ms_p99": pct(0.99),
        "tick_ms_max": pct(1.0),
        "ticks": times.len(),
        "admitted": admitted,
        "script_calls": calls,
        "snapshot_entries": samples,
    });
    if away > 0 {
        row["away"] = away.into();
        row["away_bytes"] = away_bytes.into();
        row["bytes_per_away_place"] = (away_bytes as f64 / away as f64).into();
    }
    Ok(row)
}

/// `n` places joined on gateway 1 and marked away, as a gateway marks the places of browsers
/// that disconnected; returns the Redis memory an away place takes (its member in `parked`
/// and its grace deadline in `away`, both measured whole).
async fn wall(store: &Store, probe: &RedisProbe, q: &QueueId, n: u64) -> anyhow::Result<u64> {
    let mut places = Vec::with_capacity(n as usize);
    for (_, len) in batches(n) {
        let Joined::Places { last, count, .. } = store.join_many(q, 1, now_ms(), len).await? else {
            anyhow::bail!("joins did not take places");
        };
        places.extend((last + 1 - count..=last).map(PlaceId));
    }
    let marked = store.mark_away(q, &places, 1, now_ms()).await?;
    anyhow::ensure!(marked == n, "only {marked} of {n} places marked away");
    Ok(probe.away_memory(q).await?)
}

/// Times the draw of a scheduled sale with `n` entrants, and how long its longest single
/// Redis command held Redis (every other queue waits that long).
async fn measure_draw(
    store: &Store,
    probe: &RedisProbe,
    n: u64,
) -> anyhow::Result<serde_json::Value> {
    let q = QueueId::new(format!("bench-draw-{n}"))?;
    store.put_queue(&q, &QueueConfig::default()).await?;
    let seed = Seed::generate();
    store
        .schedule(&q, Some(now_ms() + 3_600_000), &seed)
        .await?;
    for (k, len) in batches(n) {
        let Joined::Scheduled { last, count, .. } = store
            .join_many(&q, (k % 6 + 1) as u16, now_ms(), len)
            .await?
        else {
            anyhow::bail!("joins did not go to the pre-queue");
        };
        // Stand-in tickets: the draw only sees their hashes.
        let entrants: Vec<_> = (last + 1 - count..=last)
            .map(|p| {
                (
                    PlaceId(p),
                    EntrantHash::of_ticket(&format!("{q}.{p}.bench")),
                )
            })
            .collect();
        store.record_entrants(&q, &entrants).await?;
    }
    // Due now (a pending sale keeps its seed when moved).
    store.schedule(&q, Some(now_ms()), &seed).await?;
    let lease = store
        .acquire_lease(&q, "bench", Duration::from_secs(600))
        .await?
        .context("lease")?;
    // Only commands of a millisecond or more: Redis also records every command a script runs.
    probe.record_commands(1000).await?;
    let scripts_before = probe.calls("evalsha").await?;
    let t = Instant::now();
    let DrawPrep::Ready(due) = store.prepare_draw(&q, &lease, 600_000, now_ms()).await? else {
        anyhow::bail!("the draw is not ready");
    };
    let read_ms = t.elapsed().as_secs_f64() * 1000.0;
    let t = Instant::now();
    let recorded = due.recorded;
    let order = due.order();
    let order_ms = t.elapsed().as_secs_f64() * 1000.0;
    let t = Instant::now();
    let outcome = store
        .run_draw(
            &q,
            &lease,
            600_000,
            now_ms(),
            recorded,
            &order.entrants,
            order.absent,
        )
        .await?;
    let script_ms = t.elapsed().as_secs_f64() * 1000.0;
    anyhow::ensure!(
        matches!(outcome, DrawOutcome::Done { drawn, .. } if drawn == n),
        "draw outcome {outcome:?}"
    );
    let t = Instant::now();
    let record = store.drawn_entrants(&q).await?;
    let record_ms = t.elapsed().as_secs_f64() * 1000.0;
    anyhow::ensure!(record.len() as u64 == n, "record of {}", record.len());
    let commands = probe.recorded_commands().await?;
    let longest = |name: Option<&str>| {
        commands
            .iter()
            .filter(|(c, _)| name.is_none_or(|n| c == n))
            .max_by_key(|(_, us)| *us)
            .map(|(c, us)| serde_json::json!({"command": c, "ms": *us as f64 / 1000.0}))
    };
    Ok(serde_json::json!({
        "entrants": n,
        "read_pre_queue_ms": read_ms,
        "order_ms": order_ms,
        "draw_scripts_ms": script_ms,
        "script_calls": probe.calls("evalsha").await? - scripts_before,
        "longest_draw_script": longest(Some("EVALSHA")),
        "longest_redis_command": longest(None),
        "read_record_ms": record_ms,
    }))
}

/// `n` places as join calls: (call number, places in it), JOIN_BATCH_MAX places each.
fn batches(n: u64) -> impl Iterator<Item = (u64, usize)> {
    let max = JOIN_BATCH_MAX as u64;
    (0..n.div_ceil(max)).map(move |k| (k, (n - k * max).min(max) as usize))
}
