//! `usher-floor`, the machine's floor for a burst of events over loopback: a small real run
//! delivers every event of every burst and reports them; impossible requests are refused with
//! a clear message.

use std::process::Command;

use anyhow::{ensure, Context};
use serde_json::Value;

fn floor(args: &[&str]) -> anyhow::Result<std::process::Output> {
    Command::new(env!("CARGO_BIN_EXE_usher-floor"))
        .args(args)
        .output()
        .context("cannot run usher-floor")
}

#[test]
fn a_small_floor_run_delivers_every_event_of_every_burst() -> anyhow::Result<()> {
    let out = floor(&[
        "--connections",
        "300",
        "--bursts",
        "3",
        "--interval-ms",
        "200",
        "--senders",
        "2",
        "--receivers",
        "2",
    ])?;
    ensure!(
        out.status.success(),
        "usher-floor failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).context("stdout is one JSON object")?;
    assert_eq!(r["connections"], 300);
    assert_eq!(r["overall"]["events"], 900, "{r}");
    let bursts = r["per_burst"].as_array().context("per_burst")?;
    assert_eq!(bursts.len(), 3);
    for b in bursts {
        assert_eq!(b["events"], 300, "{b}");
        let (p50, p99, max) = (
            b["p50_ms"].as_f64().context("p50")?,
            b["p99_ms"].as_f64().context("p99")?,
            b["max_ms"].as_f64().context("max")?,
        );
        assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{b}");
    }
    assert!(
        r["sender_cpu_us_per_event"]
            .as_f64()
            .context("sender cpu")?
            > 0.0
    );
    assert!(
        r["receiver_cpu_us_per_event"]
            .as_f64()
            .context("receiver cpu")?
            > 0.0
    );
    Ok(())
}

#[test]
fn more_connections_than_descriptors_allow_are_refused_up_front() -> anyhow::Result<()> {
    let out = floor(&["--connections", "1000000"])?;
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--connections"), "{err}");
    assert!(out.stdout.is_empty());
    Ok(())
}
