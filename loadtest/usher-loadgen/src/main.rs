//! `usher-loadgen`: see `usher-loadgen --help` and loadtest/README.md.

use clap::Parser;
use usher_loadgen::cli::Args;
use usher_loadgen::coordinator::{self, Outputs};
use usher_loadgen::plan::Plan;
use usher_loadgen::worker;

/// mimalloc: fewer cycles per allocation than glibc malloc, which showed in profiles of the
/// join path, and less fragmentation with many small per-connection allocations.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args = Args::parse();
    // Huge pages made the kernel zero 2 MiB at a time as connections came and went; the
    // workers inherit this across exec.
    usher_runtime::disable_transparent_huge_pages();
    let code = match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("usher-loadgen: error: {e:#}");
            1
        }
    };
    std::process::exit(code);
}

fn run(args: Args) -> anyhow::Result<i32> {
    let plan = Plan::from_args(&args)?;
    if let Some(index) = args.worker_index {
        if let Some(count) = args.worker_count {
            anyhow::ensure!(
                count == plan.workers,
                "--worker-count {count} does not match --workers {}",
                plan.workers
            );
        }
        let epoch = args.epoch_ms.unwrap_or_else(worker::now_ms);
        worker::run(plan, index, epoch)?;
        return Ok(0);
    }
    let argv: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    rt.block_on(coordinator::run(
        plan,
        argv,
        Outputs {
            report: args.report.clone(),
            plot: args.plot.clone(),
            quiet: args.quiet,
        },
    ))
}
