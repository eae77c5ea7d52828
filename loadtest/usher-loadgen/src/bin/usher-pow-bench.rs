//! What a proof-of-work queue costs whoever solves it: the Rust solver's hashes per second
//! per core on this machine (what a bot farm's CPU does), turned into seconds per place and
//! CPU-hours and dollars per 1,000 places at each difficulty. With the page solver's phone
//! figure (`crates/usher-testkit/tests/browsers/pow_page.rs` writes it to `target/pow-figures.txt`) it also prints a phone's
//! seconds per place. Figures only: BENCHMARKS.md, "Proof of work", records them.

use std::time::{Duration, Instant};

use clap::Parser;

/// Measures the proof-of-work solver and prints the cost table.
#[derive(Debug, Parser)]
#[command(name = "usher-pow-bench", version, about, long_about)]
struct Args {
    /// Seconds to hash for on each thread.
    #[arg(long, env = "USHER_POW_BENCH_SECONDS", default_value_t = 5)]
    seconds: u64,

    /// Threads hashing at once (one per core measures the machine; 1 measures a core).
    #[arg(long, env = "USHER_POW_BENCH_THREADS", default_value_t = 1)]
    threads: usize,

    /// Price of one vCPU-hour in dollars for the table. The default is AWS EC2 c7g.large
    /// on-demand in us-east-1 ($0.0725 an hour for 2 vCPUs, list price), an assumption:
    /// spot instances and other clouds cost less, and a stolen botnet costs its owner nothing.
    #[arg(long, env = "USHER_POW_BENCH_VCPU_HOUR_USD", default_value_t = 0.03625)]
    vcpu_hour_usd: f64,

    /// The page solver's hashes per second on a phone (the 4×-throttled figure of
    /// `crates/usher-testkit/tests/browsers/pow_page.rs`), for the phone column; left out without it.
    #[arg(long, env = "USHER_POW_BENCH_PHONE_HASHES_PER_SECOND")]
    phone_hashes_per_second: Option<f64>,
}

/// Hashes one thread computes in `d`, solving fresh puzzles at difficulty 16 back to back.
fn hash_for(d: Duration, seed: usize) -> u64 {
    let start = Instant::now();
    let mut hashes = 0;
    let mut i = 0u64;
    while start.elapsed() < d {
        let puzzle = format!("2.bench.{seed}.{i}.AAAAAAAAAAAAAAAA.BBBBBBBBBBBBBBBBBBBBBB");
        hashes += usher_pow::solve(&puzzle, 16, 0).1;
        i += 1;
    }
    hashes
}

fn main() {
    let a = Args::parse();
    let d = Duration::from_secs(a.seconds.max(1));
    let started = Instant::now();
    let handles: Vec<_> = (0..a.threads.max(1))
        .map(|t| std::thread::spawn(move || hash_for(d, t)))
        .collect();
    let total: u64 = handles.into_iter().filter_map(|h| h.join().ok()).sum();
    let per_core = total as f64 / started.elapsed().as_secs_f64() / a.threads.max(1) as f64;
    println!(
        "rust solver: {per_core:.0} hashes/s per core ({} threads)",
        a.threads.max(1)
    );
    println!("vCPU-hour: ${:.5} (assumed)", a.vcpu_hour_usd);
    println!(
        "difficulty | expected hashes | CPU s/place | CPU-hours/1,000 places | $/1,000 places{}",
        if a.phone_hashes_per_second.is_some() {
            " | phone s/place"
        } else {
            ""
        }
    );
    for difficulty in [16u32, 18, 19, 20, 22, 24] {
        let expected = 2f64.powi(difficulty as i32);
        let secs = expected / per_core;
        let hours = secs * 1000.0 / 3600.0;
        let phone = a
            .phone_hashes_per_second
            .map(|p| format!(" | {:.2}", expected / p))
            .unwrap_or_default();
        println!(
            "{difficulty} | {expected:.0} | {secs:.3} | {hours:.4} | {:.5}{phone}",
            hours * a.vcpu_hour_usd
        );
    }
}
