//! usher-rehearse: a sale rehearsed before it happens.
//!
//! [`scenario`] reads the inputs (the arrival curve through `usher_size::arrivals`, the
//! behaviours, the queue's settings through the dispatcher's queues file, so exactly what
//! `PUT /admin/queues/{queue}` takes); [`behaviour`] draws each browser's fate from the
//! seed; [`sim`] runs the virtual day on a real Redis through usher-core's `Store` and the
//! dispatcher's `Admitter` on a `VirtualClock`; [`results`] turns the run into figures;
//! [`plots`] and [`html`] draw them. Imports run one way, in that order.

pub mod behaviour;
pub mod cli;
pub mod html;
pub mod plots;
pub mod results;
pub mod scenario;
pub mod sim;

use anyhow::Context;

use cli::Args;
use results::Report;
use scenario::Scenario;

/// Reads the inputs, rehearses, writes rehearsal.json, waits.svg, timeline.svg and
/// index.html into `--out`, and returns the headline.
pub async fn run(args: &Args) -> anyhow::Result<String> {
    let sc = Scenario::from_args(args)?;
    let run = sim::rehearse(&sc, &args.redis).await?;
    let report = Report::of(&sc, run);
    write(&args.out, &report)?;
    Ok(report.headline())
}

/// [`run`] on a runtime of its own (the binary's `main`).
pub fn run_blocking(args: &Args) -> anyhow::Result<String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?
        .block_on(run(args))
}

/// Writes the report's four files into `dir` (created).
pub fn write(dir: &std::path::Path, report: &Report) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating --out {}", dir.display()))?;
    let waits = plots::waits(report);
    let timeline = plots::timeline(report);
    let files = [
        ("rehearsal.json", serde_json::to_string_pretty(report)?),
        ("waits.svg", waits.clone()),
        ("timeline.svg", timeline.clone()),
        ("index.html", html::page(report, &waits, &timeline)),
    ];
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
