//! usher-loadgen: real SSE load on usher gateways.
//!
//! The binary's coordinator ([`coordinator`]) starts worker processes of itself ([`worker`]);
//! each worker runs thousands of browser-like connections ([`conn`]: opened by [`open`],
//! reacting to their streams in [`browser`], recording into a [`recorder`]) over bare HTTP/1.1
//! ([`http`]) and reports JSON lines ([`proto`]). The coordinator merges them into a
//! [`report::Report`], checks fairness ([`checks`]) and draws a [`plot`] (with the primitives of
//! [`svg`]); [`cpu`] says what the run cost the load generator itself, and whether it was short
//! of CPU, and [`machine`] how busy the whole machine was.
//!
//! [`joins_floor`] is the other side: the server of `usher-joins-floor`, a stand-in gateway
//! that answers every stream alike, for measuring what joins cost without usher.

pub mod arrivals;
pub mod browser;
pub mod checks;
pub mod cli;
pub mod conn;
pub mod coordinator;
pub mod cpu;
pub mod http;
pub mod joins_floor;
pub mod leaving;
pub mod limits;
pub mod linger;
pub mod machine;
pub mod open;
pub mod plan;
pub mod plot;
pub mod proto;
pub mod recorder;
pub mod report;
pub mod stalls;
pub mod stats;
pub mod svg;
pub mod waits;
pub mod worker;

use cli::Args;
use coordinator::Outputs;
use plan::Plan;

/// The whole program for parsed `args`: a worker when `--worker-index` is given (the
/// coordinator starts those), the coordinator otherwise. Returns the process exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
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
