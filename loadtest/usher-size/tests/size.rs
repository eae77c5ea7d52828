//! `usher-size` run as a real process: plans from a CSV and from a named shape (their JSON
//! checked against answers worked out by hand and against BENCHMARKS.md's figures), bad input
//! refused with a message and a non-zero exit, and the worked example of docs/deploying.md
//! reproduced exactly.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{ensure, Context};
use serde_json::Value;
use usher_size::figures::{Costs, BUILT_IN};

fn size(args: &[&str]) -> anyhow::Result<Output> {
    Command::new(env!("CARGO_BIN_EXE_usher-size"))
        .args(args)
        // The flags' variables must not leak in from the environment running the tests.
        .env_remove("USHER_SIZE_CROWD")
        .env_remove("USHER_SIZE_ARRIVALS")
        .env_remove("USHER_SIZE_HEADROOM")
        .output()
        .context("cannot run usher-size")
}

fn json(args: &[&str]) -> anyhow::Result<Value> {
    let out = size(args)?;
    ensure!(
        out.status.success(),
        "usher-size failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).context("stdout is one JSON object")
}

fn value(plan: &Value, key: &str) -> f64 {
    plan["plan"][key]["value"]
        .as_f64()
        .unwrap_or_else(|| panic!("no plan.{key}.value in {plan}"))
}

fn csv(text: &str) -> anyhow::Result<tempfile::NamedTempFile> {
    let file = tempfile::NamedTempFile::new()?;
    std::fs::write(file.path(), text)?;
    Ok(file)
}

fn path(file: &tempfile::NamedTempFile) -> anyhow::Result<&str> {
    file.path().to_str().context("a UTF-8 temporary path")
}

#[test]
fn a_csv_curve_gives_the_line_worked_out_by_hand() -> anyhow::Result<()> {
    let file = csv("second,joins\n0,300\n1,300\n\n# nobody in second 2\n3,0\n")?;
    let p = json(&["--arrivals", path(&file)?, "--rate", "100", "--json"])?;
    assert_eq!(p["inputs"]["seconds"], 4);
    assert_eq!(value(&p, "crowd"), 600.0);
    assert_eq!(value(&p, "peak_join_rate"), 300.0);
    // 200, 400, 300, 200 waiting at the ends of the four seconds; then 200 / 100 = 2 s more.
    assert_eq!(value(&p, "peak_waiting"), 400.0);
    assert_eq!(value(&p, "longest_wait"), 4.0);
    assert_eq!(value(&p, "line_empties"), 6.0);
    // A small sale: still two gateways (one may fail) and two dispatcher replicas.
    assert_eq!(value(&p, "gateways"), 2.0);
    assert_eq!(value(&p, "dispatcher_replicas"), 2.0);
    // Every cost line names its BENCHMARKS.md row.
    assert_eq!(
        p["plan"]["gateway_rss"]["source"],
        "Load: gateway memory; Load: gateway memory (before any connection)"
    );
    assert_eq!(
        p["plan"]["redis_memory"]["source"],
        "Load: Redis memory; Load: tick behind away places"
    );
    assert_eq!(p["inputs"]["benchmarks"], "built in");
    // The costs used, each with its row, as read from BENCHMARKS.md.
    let costs = Costs::from_markdown(BUILT_IN)?;
    assert_eq!(
        p["costs"]["kib_per_connection"]["source"],
        "Load: gateway memory"
    );
    assert_eq!(
        p["costs"]["kib_per_connection"]["value"].as_f64(),
        Some(costs.kib_per_connection.value)
    );
    Ok(())
}

#[test]
fn a_named_shape_is_planned_from_this_trees_figures() -> anyhow::Result<()> {
    let costs = Costs::from_markdown(BUILT_IN)?;
    let p = json(&[
        "--crowd",
        "100000",
        "--shape",
        "spike",
        "--duration",
        "60",
        "--rate",
        "500",
        "--headroom",
        "0",
        "--away-share",
        "0.5",
        "--json",
    ])?;
    // 100,000 over 60 s is 1,666.7 a second; 500 leave: 70,000 wait after 60 s, 140 s more.
    assert_eq!(value(&p, "peak_join_rate"), 1_667.0);
    assert_eq!(value(&p, "peak_waiting"), 70_000.0);
    assert_eq!(value(&p, "line_empties"), 200.0);
    assert_eq!(value(&p, "peak_streams"), 35_000.0);
    // A gateway holds at most what one of the load run's gateways held (under 18,000).
    let per_gw = (costs.held.value / costs.load_gateways.value).floor();
    assert_eq!(value(&p, "streams_per_gateway_max"), per_gw.min(18_000.0));
    let gateways = value(&p, "gateways");
    assert_eq!(gateways, (35_000.0 / per_gw.min(18_000.0)).ceil() + 1.0);
    let per_gw_peak = value(&p, "streams_per_gateway");
    assert_eq!(per_gw_peak, (35_000.0 / (gateways - 1.0)).ceil());
    assert_eq!(value(&p, "open_files_per_gateway"), per_gw_peak + 64.0);
    // Half the places away: half at the waiting figure, half at the away figure.
    let bytes = 70_000.0 * (0.5 * costs.bytes_per_waiting.value + 0.5 * costs.bytes_per_away.value);
    assert_eq!(
        value(&p, "redis_memory"),
        (bytes / 1_048_576.0 * 10.0).round() / 10.0
    );
    assert_eq!(
        value(&p, "redis_commands_waiting"),
        costs.waiting_commands_per_s.value
    );
    let assumptions = p["plan"]["assumptions"].as_array().context("assumptions")?;
    assert!(
        assumptions[0]
            .as_str()
            .is_some_and(|a| a.contains(&format!("{}-core machine", costs.machine_vcpus.text))),
        "{assumptions:?}"
    );
    Ok(())
}

#[test]
fn two_waves_drain_between_them_and_after() -> anyhow::Result<()> {
    // 100 people in two waves over 8 s: 25, 25, 0, 0, 25, 25, 0, 0 joins; at 10 a second
    // 15, 30, 20, 10, 25, 40, 30, 20 wait; the last 20 need 2 s more.
    let p = json(&[
        "--crowd",
        "100",
        "--shape",
        "two-waves",
        "--duration",
        "8",
        "--rate",
        "10",
        "--json",
    ])?;
    assert_eq!(p["inputs"]["curve"], "two-waves over 8 s");
    assert_eq!(value(&p, "peak_join_rate"), 25.0);
    assert_eq!(value(&p, "peak_waiting"), 40.0);
    assert_eq!(value(&p, "line_empties"), 10.0);
    Ok(())
}

#[test]
fn bad_input_is_refused_with_what_is_wrong() -> anyhow::Result<()> {
    let refused = |args: &[&str], code: i32, says: &str| -> anyhow::Result<()> {
        let out = size(args)?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(
            out.status.code() == Some(code) && stderr.contains(says),
            "{args:?}: exit {:?}, stderr {stderr:?}, expected {code} saying {says:?}",
            out.status.code()
        );
        ensure!(out.stdout.is_empty(), "{args:?} printed a plan");
        Ok(())
    };
    refused(
        &["--crowd", "0", "--rate", "10"],
        2,
        "the crowd must be at least 1 person",
    )?;
    refused(
        &["--crowd", "-5", "--rate", "10"],
        2,
        "the crowd must be at least 1 person",
    )?;
    refused(
        &["--crowd", "10", "--rate", "0"],
        2,
        "the admission rate must be above 0",
    )?;
    refused(
        &["--crowd", "10", "--rate", "-1"],
        2,
        "the admission rate must be above 0",
    )?;
    refused(
        &["--crowd", "10", "--rate", "5", "--away-share", "1.5"],
        2,
        "a share is a number from 0 to 1",
    )?;
    refused(&["--rate", "5"], 2, "--crowd")?;
    let file = csv("second,joins\n0,10\n1,x\n")?;
    refused(
        &["--arrivals", path(&file)?, "--rate", "5"],
        1,
        "line 3: expected `second,joins`",
    )?;
    refused(
        &["--arrivals", path(&file)?, "--crowd", "10", "--rate", "5"],
        2,
        "cannot be used with",
    )?;
    let file = csv("0,10\n0,20\n")?;
    refused(
        &["--arrivals", path(&file)?, "--rate", "5"],
        1,
        "line 2: second 0 comes after second 0",
    )?;
    refused(
        &["--arrivals", "/nonexistent/arrivals.csv", "--rate", "5"],
        1,
        "cannot read --arrivals",
    )?;
    let bench = csv(&BUILT_IN.replace("| gateway memory |", "| gateway RSS |"))?;
    refused(
        &[
            "--crowd",
            "10",
            "--rate",
            "5",
            "--benchmarks",
            path(&bench)?,
        ],
        1,
        "section \"Load\": no row starting \"| gateway memory |\"",
    )?;
    Ok(())
}

/// docs/deploying.md shows a command and, between the `usher-size:begin`/`end` markers, its
/// output. The command is run as written (its `target/release/usher-size` is this build's
/// binary) and its output must be what the page shows. `USHER_BLESS=1` writes the output
/// into the page instead (after `make bench` changed a figure).
#[test]
fn the_worked_example_in_the_docs_is_what_the_command_prints() -> anyhow::Result<()> {
    const BEGIN: &str = "<!-- usher-size:begin -->\n";
    const END: &str = "<!-- usher-size:end -->";
    const COMMAND: &str = "target/release/usher-size ";
    let page: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/deploying.md");
    let text = std::fs::read_to_string(&page)?;
    let command = text
        .lines()
        .find_map(|l| l.strip_prefix(COMMAND))
        .context("docs/deploying.md has no `target/release/usher-size` command")?;
    ensure!(
        !command.contains(['\'', '"', '\\', '$']),
        "the example is split on spaces: keep quotes and variables out of it: {command}"
    );
    let args: Vec<&str> = command.split_whitespace().collect();
    let out = size(&args)?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout)?;
    let start = text.find(BEGIN).context("no begin marker")? + BEGIN.len();
    let end = text.find(END).context("no end marker")?;
    if std::env::var_os("USHER_BLESS").is_some() {
        let blessed = format!("{}{printed}{}", &text[..start], &text[end..]);
        std::fs::write(&page, blessed)?;
        return Ok(());
    }
    assert_eq!(
        &text[start..end],
        printed,
        "docs/deploying.md's usher-size example is stale: run `USHER_BLESS=1 cargo test -p usher-size --test size the_worked_example`"
    );
    Ok(())
}
