//! Command line (every flag is also an `USHER_SIZE_*` environment variable) and the two ways a
//! plan is written: a Markdown table for people, JSON for tools.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

use crate::arrivals::{parse_csv, Shape};
use crate::figures::{Costs, BUILT_IN};
use crate::plan::{fmt_number, plan, Inputs, Plan};

const LONG_ABOUT: &str = "\
Plans a sale's deployment from the crowd you expect, how it arrives and how fast the queue
admits: how many gateways, their memory and open files, Redis memory and CPU, and dispatcher
replicas. Every number comes with how it was computed and the BENCHMARKS.md row its cost
comes from.

The costs are read from the BENCHMARKS.md this binary was built with (or --benchmarks): a
missing row stops it with the row's name. They were measured on one small machine that ran
everything at once (BENCHMARKS.md, \"The machine\"), and are not scaled to bigger ones;
run `make bench` on your own machines and pass their BENCHMARKS.md to plan from those.

The line is computed second by second: each second's joins come in and --rate places are
admitted. The arrival curve is a named shape (--shape, --crowd, --duration) or a CSV of
`second,joins` lines (--arrivals).

Exit status: 0 with a plan; 2 when a flag's value is refused (a crowd or a rate of 0, a
share above 1: the message names the flag and why); 1 when the --arrivals CSV is refused
(the message names the line) or BENCHMARKS.md lacks a figure (it names the row).";

/// How the crowd arrives and is admitted, and the limits each gateway runs with.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "usher-size",
    version,
    about = "Plans gateways, Redis and dispatchers for a sale from the costs BENCHMARKS.md measures",
    long_about = LONG_ABOUT,
    allow_negative_numbers = true
)]
pub struct Args {
    /// People expected, spread over --duration by --shape. Not with --arrivals (the CSV's
    /// joins add up to the crowd).
    #[arg(long, env = "USHER_SIZE_CROWD", value_name = "PEOPLE", value_parser = positive_count, required_unless_present = "arrivals", conflicts_with = "arrivals")]
    pub crowd: Option<u64>,

    /// How the crowd arrives: `spike` (an even rate over --duration), `ramp` (a rate rising
    /// from 0 to twice the average), `two-waves` (half the crowd over the first quarter,
    /// half over the third).
    #[arg(long, env = "USHER_SIZE_SHAPE", value_enum, default_value = "spike")]
    pub shape: Shape,

    /// Seconds the shape is spread over (at most a day).
    #[arg(long, env = "USHER_SIZE_DURATION", value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub duration: u64,

    /// A CSV of `second,joins` lines instead of a shape: people joining in that second after
    /// the opening (seconds increasing, missing ones have no joins; a `second,joins` header,
    /// blank lines and `#` comments are allowed).
    #[arg(long, env = "USHER_SIZE_ARRIVALS", value_name = "CSV")]
    pub arrivals: Option<PathBuf>,

    /// Admissions per second: the queue's `admit_per_second`.
    #[arg(long, env = "USHER_SIZE_RATE", value_name = "PER_SECOND", value_parser = positive_rate)]
    pub rate: f64,

    /// Share of the waiting places whose browser is away (disconnected, within the queue's
    /// grace) at the peak, 0 to 1: they hold no stream but cost Redis more.
    #[arg(long, env = "USHER_SIZE_AWAY_SHARE", value_name = "SHARE", default_value_t = 0.0, value_parser = share)]
    pub away_share: f64,

    /// The queue binds places to a browser key (`"bind": "browser_key"`): Redis keeps the
    /// key of each place.
    #[arg(long, env = "USHER_SIZE_BIND")]
    pub bind: bool,

    /// Each gateway's open-files limit (20,000 on the machine BENCHMARKS.md was measured on;
    /// the Kubernetes and ECS examples set 65,536). A gateway holds at most this less its 64
    /// reserve sockets; keep its `USHER_MAX_SOCKETS` at or below the limit too.
    #[arg(long, env = "USHER_SIZE_OPEN_FILES", value_name = "FILES", default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(100..))]
    pub open_files: u64,

    /// Each gateway's `USHER_MAX_CONNECTIONS` (the gateway's default, and the deploy
    /// examples': 18,000).
    #[arg(long, env = "USHER_SIZE_MAX_CONNECTIONS", value_name = "STREAMS", default_value_t = 18_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: u64,

    /// Spare capacity planned over the peak, in percent, for gateway counts and Redis memory.
    #[arg(long, env = "USHER_SIZE_HEADROOM", value_name = "PERCENT", default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=500))]
    pub headroom: u64,

    /// Print the plan as JSON instead of a table.
    #[arg(long, env = "USHER_SIZE_JSON")]
    pub json: bool,

    /// Read the costs from this BENCHMARKS.md instead of the one built in.
    #[arg(long, env = "USHER_SIZE_BENCHMARKS", value_name = "FILE")]
    pub benchmarks: Option<PathBuf>,
}

fn positive_count(s: &str) -> Result<u64, String> {
    match s.trim().parse::<i64>() {
        Ok(n) if n > 0 => Ok(n as u64),
        Ok(n) => Err(format!("{n}: the crowd must be at least 1 person")),
        Err(_) => Err(format!("{s:?} is not a whole number of people")),
    }
}

fn positive_rate(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        Ok(_) => Err(format!(
            "{s}: the admission rate must be above 0 (a queue admitting no one never empties)"
        )),
        Err(_) => Err(format!("{s:?} is not a number of admissions a second")),
    }
}

fn share(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err(format!("{s:?}: a share is a number from 0 to 1")),
    }
}

/// The plan `args` ask for, written as they ask.
pub fn run(args: &Args) -> anyhow::Result<String> {
    let (joins, curve) = match (&args.arrivals, args.crowd) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --arrivals {}", path.display()))?;
            let joins =
                parse_csv(&text).with_context(|| format!("--arrivals {}", path.display()))?;
            (joins, format!("{} (CSV)", path.display()))
        }
        (None, Some(crowd)) => (
            args.shape.joins(crowd, args.duration),
            format!(
                "{} over {} s",
                serde_json::to_value(args.shape)?
                    .as_str()
                    .unwrap_or_default(),
                args.duration
            ),
        ),
        (None, None) => anyhow::bail!("give --crowd (with --shape and --duration) or --arrivals"),
    };
    let (md, benchmarks) = match &args.benchmarks {
        Some(path) => (
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --benchmarks {}", path.display()))?,
            path.display().to_string(),
        ),
        None => (BUILT_IN.to_owned(), "built in".to_owned()),
    };
    let costs = Costs::from_markdown(&md)?;
    let inputs = Inputs {
        joins,
        rate: args.rate,
        away_share: args.away_share,
        bind: args.bind,
        open_files: args.open_files,
        max_connections: args.max_connections,
        headroom_percent: args.headroom,
    };
    let p = plan(&inputs, &costs);
    if args.json {
        let json = serde_json::json!({
            "inputs": {
                "curve": curve,
                "seconds": inputs.joins.len(),
                "rate": inputs.rate,
                "away_share": inputs.away_share,
                "bind": inputs.bind,
                "open_files": inputs.open_files,
                "max_connections": inputs.max_connections,
                "headroom_percent": inputs.headroom_percent,
                "benchmarks": benchmarks,
            },
            "plan": p,
            "costs": costs,
        });
        return Ok(serde_json::to_string_pretty(&json)? + "\n");
    }
    Ok(table(&p, &curve, args.rate))
}

/// The plan as a Markdown table, then its assumptions.
pub fn table(p: &Plan, curve: &str, rate: f64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Plan for {} people, {curve}, admitted at {}/s.\n",
        fmt_number(p.crowd.value),
        fmt_number(rate)
    );
    out.push_str("| quantity | value | how | source |\n|---|---|---|---|\n");
    for (_, line) in p.lines() {
        let _ = writeln!(
            out,
            "| {} | {} {} | {} | {} |",
            line.quantity,
            fmt_number(line.value),
            line.unit,
            line.how,
            line.source
        );
    }
    out.push_str("\nAssumptions:\n");
    for a in &p.assumptions {
        let _ = writeln!(out, "- {a}");
    }
    out
}
