//! `usher-bench-record`: what the fairness record costs (docs/fairness-report.md), against a
//! `redis-server` it starts itself (or `--redis-url`):
//! * Redis memory per recorded place: `--places` places join a recording queue; the record
//!   key's `MEMORY USAGE` and `INFO memory`'s `used_memory` growth, against the same joins
//!   into a queue that does not record, each divided by the places;
//! * the join path's extra cost: the same single-place join calls (what a gateway sends at
//!   low load; under a burst its batches grow and the cost per join falls) timed into a queue
//!   that records and one that does not, in alternating rounds so both see the same machine,
//!   and their ratio; then batches of `JOIN_BATCH_MAX`;
//! * the report's cost: for each of `--report-places`, a synthetic record of a sale that
//!   many places long (written whole with `SET`: lanes overtaking, leaves, places still
//!   waiting, 50,000 networks) is reported by `Store::fairness_report`, as the dispatcher's
//!   route does; its wall time, and the process' peak resident memory above what it held
//!   before (`VmHWM`, reset through `/proc/self/clear_refs`; Linux only).
//!
//! Prints one JSON object. Used by `make bench` (scripts/bench.sh, scenario `record`).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use usher_core::ids::QueueId;
use usher_core::keys::QueueKeys;
use usher_core::record::{JoinNote, NetworkHash, RECORD_WIDTH};
use usher_core::store::{QueueConfig, Store, JOIN_BATCH_MAX};
use usher_core::time::now_ms;
use usher_testkit::{RedisProbe, RedisServer};

/// Measures the fairness record's memory per place and the join path's extra cost.
#[derive(Debug, Parser)]
#[command(name = "usher-bench-record", version, about, long_about)]
struct Args {
    /// Redis to use; by default a fresh `redis-server` is started on a free port and stopped
    /// at the end. Its data is flushed: never point this at a Redis that matters.
    #[arg(long, env = "USHER_BENCH_REDIS_URL")]
    redis_url: Option<String>,

    /// Places joined into each queue for the memory figures.
    #[arg(long, env = "USHER_BENCH_RECORD_PLACES", default_value_t = 100_000)]
    places: u64,

    /// Single-place join calls timed per queue and round.
    #[arg(long, env = "USHER_BENCH_RECORD_JOINS", default_value_t = 5_000)]
    joins: u64,

    /// Alternating rounds of the join timing.
    #[arg(long, env = "USHER_BENCH_RECORD_ROUNDS", default_value_t = 4)]
    rounds: u32,

    /// Record sizes (places) whose report is timed, comma-separated (empty: none).
    #[arg(
        long,
        env = "USHER_BENCH_RECORD_REPORT_PLACES",
        value_delimiter = ',',
        default_value = "100000,1000000"
    )]
    report_places: Vec<u64>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (_own, url) =
        RedisServer::given_or_own(args.redis_url.as_deref()).context("starting redis-server")?;
    let store = Store::connect(&url).await?;
    let probe = RedisProbe::connect(&url).await?;
    let mut conn = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await?;

    // Memory: the same joins with and without the record.
    let plain = fill(&store, &probe, "mem-plain", false, args.places).await?;
    let recorded = fill(&store, &probe, "mem-recorded", true, args.places).await?;
    let key = QueueKeys::new(&QueueId::new("mem-recorded")?).record;
    let usage: u64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(&key)
        .query_async(&mut conn)
        .await?;
    let n = args.places as f64;

    // The join path: single joins, alternating between the two queues.
    let (mut off_s, mut on_s) = (0.0, 0.0);
    for round in 0..args.rounds {
        for record in [false, true] {
            let q = queue(&store, &format!("join-{record}-{round}"), record).await?;
            let t = Instant::now();
            for i in 0..args.joins {
                let note = [note(&q, i)];
                let notes: &[JoinNote] = if record { &note } else { &[] };
                store
                    .join_recorded(&q, 1, now_ms(), &[None], &[], None, notes)
                    .await?;
            }
            let s = t.elapsed().as_secs_f64();
            if record {
                on_s += s;
            } else {
                off_s += s;
            }
        }
    }
    let calls = f64::from(args.rounds) * args.joins as f64;
    // Batches: JOIN_BATCH_MAX places per call.
    let mut batch = [0.0f64; 2];
    for record in [false, true] {
        let q = queue(&store, &format!("batch-{record}"), record).await?;
        let notes: Vec<JoinNote> = (0..JOIN_BATCH_MAX as u64).map(|i| note(&q, i)).collect();
        let notes: &[JoinNote] = if record { &notes } else { &[] };
        let t = Instant::now();
        let rounds = 200;
        for _ in 0..rounds {
            store
                .join_recorded(
                    &q,
                    1,
                    now_ms(),
                    &vec![None; JOIN_BATCH_MAX],
                    &[],
                    None,
                    notes,
                )
                .await?;
        }
        batch[usize::from(record)] =
            t.elapsed().as_secs_f64() * 1e6 / (rounds as f64 * JOIN_BATCH_MAX as f64);
    }
    let mut reports = Vec::new();
    for &n in &args.report_places {
        reports.push(report_cost(&store, &mut conn, n).await?);
    }
    println!(
        "{}",
        serde_json::json!({
            "reports": reports,
            "places": args.places,
            "record_key_bytes": usage,
            "record_bytes_per_place": usage as f64 / n,
            "used_memory_per_place_plain": plain / n,
            "used_memory_per_place_recorded": recorded / n,
            "extra_used_memory_per_place": (recorded - plain) / n,
            "single_join_us_plain": off_s * 1e6 / calls,
            "single_join_us_recorded": on_s * 1e6 / calls,
            "single_join_ratio": on_s / off_s,
            "batch_join_us_per_place_plain": batch[0],
            "batch_join_us_per_place_recorded": batch[1],
            "batch_join_ratio": batch[1] / batch[0],
            "join_batch": JOIN_BATCH_MAX,
        })
    );
    Ok(())
}

/// A queue that admits nobody (paused), recording or not.
async fn queue(store: &Store, id: &str, record: bool) -> anyhow::Result<QueueId> {
    let q = QueueId::new(id)?;
    let cfg = QueueConfig {
        paused: true,
        passthrough: false,
        record,
        ..QueueConfig::default()
    };
    store.put_queue(&q, &cfg).await?;
    Ok(q)
}

/// Join `i`'s note: one of 65,536 networks.
fn note(q: &QueueId, i: u64) -> JoinNote {
    let ip = IpAddr::V4(Ipv4Addr::new(10, (i >> 8) as u8, i as u8, 1));
    JoinNote {
        network: Some(NetworkHash::of(b"bench", q, ip)),
        issue_to_join_ms: None,
    }
}

/// Joins `n` places into a new queue `id`: the growth of Redis' `used_memory`, in bytes.
async fn fill(
    store: &Store,
    probe: &RedisProbe,
    id: &str,
    record: bool,
    n: u64,
) -> anyhow::Result<f64> {
    let before = used_memory(probe).await?;
    let q = queue(store, id, record).await?;
    let mut left = n;
    let mut i = 0;
    while left > 0 {
        let k = left.min(JOIN_BATCH_MAX as u64) as usize;
        let notes: Vec<JoinNote> = (0..k as u64).map(|j| note(&q, i + j)).collect();
        let notes: &[JoinNote] = if record { &notes } else { &[] };
        store
            .join_recorded(&q, 1, now_ms(), &vec![None; k], &[], None, notes)
            .await?;
        left -= k as u64;
        i += k as u64;
    }
    Ok(used_memory(probe).await? - before)
}

async fn used_memory(probe: &RedisProbe) -> anyhow::Result<f64> {
    let info = probe.info("memory").await?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .context("used_memory in INFO memory")
}

/// Writes a synthetic record of `n` places into a new recording queue and times its report:
/// `{places, report_seconds, report_peak_rss_mb}`.
async fn report_cost(
    store: &Store,
    conn: &mut redis::aio::MultiplexedConnection,
    n: u64,
) -> anyhow::Result<serde_json::Value> {
    let q = QueueId::new(format!("report-{n}"))?;
    store
        .put_queue(
            &q,
            &QueueConfig {
                record: true,
                ..QueueConfig::default()
            },
        )
        .await?;
    store.put_record(&q, &synthetic_record(n), now_ms()).await?;
    // The record is in Redis only now: the peak from here is the report's.
    std::fs::write("/proc/self/clear_refs", "5").context("resetting VmHWM")?;
    let before = status_kb("VmRSS")?;
    let t = Instant::now();
    let report = store.fairness_report(&q).await?.context("the queue")?;
    let seconds = t.elapsed().as_secs_f64();
    let peak = status_kb("VmHWM")?;
    let places = report.record.map(|r| r.places).unwrap_or_default();
    anyhow::ensure!(places == n, "the report counted {places} places of {n}");
    let _: () = redis::cmd("DEL")
        .arg(QueueKeys::new(&q).record)
        .query_async(conn)
        .await?;
    Ok(serde_json::json!({
        "places": n,
        "report_seconds": seconds,
        "report_peak_rss_mb": peak.saturating_sub(before) as f64 / 1024.0,
    }))
}

/// A sale of `n` places over an hour, as `lua/record.lua` lays it out: every tenth place
/// in lane 1 (admitted after 10 s), the others after 60 s, one in 20 leaves after 30 s,
/// the last 5 % still waiting; admission ordinals by admission time.
fn synthetic_record(n: u64) -> Vec<u8> {
    let joined = |i: u64| (i * 3_600_000 / n.max(1)) as u32;
    let mut admitted: Vec<(u32, u64)> = Vec::new();
    for i in 0..n * 95 / 100 {
        if i % 20 != 7 {
            let wait = if i % 10 == 0 { 10_000 } else { 60_000 };
            admitted.push((joined(i) + wait, i));
        }
    }
    admitted.sort_unstable();
    let mut ordinal = vec![0u32; n as usize];
    let mut at = vec![0u32; n as usize];
    for (o, &(t, i)) in admitted.iter().enumerate() {
        ordinal[i as usize] = o as u32 + 1;
        at[i as usize] = t;
    }
    let mut out = Vec::with_capacity(n as usize * RECORD_WIDTH);
    for i in 0..n {
        let j = joined(i);
        let (left, left_at) = if i % 20 == 7 && i < n * 95 / 100 {
            (1u8, j + 30_001)
        } else {
            (0, 0)
        };
        let admitted_at = if ordinal[i as usize] > 0 {
            at[i as usize] + 1
        } else {
            0
        };
        out.push(1); // kind: joined the line
        out.push(u8::from(i % 10 == 0));
        out.push(left);
        out.push(u8::from(admitted_at > 0)); // booked
        out.push(0);
        out.push(0);
        out.extend(60u16.to_be_bytes());
        out.extend(j.to_be_bytes());
        out.extend(admitted_at.to_be_bytes());
        out.extend(ordinal[i as usize].to_be_bytes());
        out.extend(left_at.to_be_bytes());
        out.extend((1 + (i % 50_000) as u32).to_be_bytes());
        out.extend(0u32.to_be_bytes());
        out.extend(u16::MAX.to_be_bytes());
        out.extend([0, 0]);
    }
    out
}

/// A `/proc/self/status` figure, in kB.
fn status_kb(field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("{field} in /proc/self/status"))
}
