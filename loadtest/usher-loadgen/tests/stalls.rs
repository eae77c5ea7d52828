//! The CPU-stall probe: a stopped load-generator process is what a stopped vCPU looks like to
//! its probe threads, so stopping the real binary with SIGSTOP for 400 ms must show up in the
//! report as one stall of about that length on every CPU it watched.

use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{ensure, Context};
use serde_json::Value;

fn signal(pid: u32, sig: &str) -> anyhow::Result<()> {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .context("cannot run kill")?
        .success();
    ensure!(ok, "kill {sig} {pid} failed");
    Ok(())
}

#[test]
fn a_stopped_process_is_reported_as_a_stall_on_every_cpu() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let report = dir.path().join("report.json");
    // Nothing listens on the gateway port: the workers just retry until the run's end. Only
    // the coordinator (which runs the probes) is stopped.
    let unused = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_usher-loadgen"))
        .args(["--gateways", &format!("http://{unused}")])
        .args(["--queue", "stalls", "--connections", "4", "--workers", "1"])
        .args(["--duration", "3", "--quiet", "--report"])
        .arg(&report)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start usher-loadgen")?;
    std::thread::sleep(Duration::from_millis(1200));
    signal(child.id(), "-STOP")?;
    std::thread::sleep(Duration::from_millis(400));
    signal(child.id(), "-CONT")?;
    let status = child.wait()?;
    ensure!(
        status.code().is_some(),
        "usher-loadgen was killed: {status}"
    );

    let r: Value = serde_json::from_slice(&std::fs::read(&report)?)?;
    let cs = &r["cpu_stalls"];
    let cpus: Vec<u64> = cs["cpus"]
        .as_array()
        .context("cpus")?
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    ensure!(!cpus.is_empty(), "no CPU watched: {cs}");
    ensure!(
        cs["cpus_watched"].as_u64() == Some(cpus.len() as u64),
        "{cs}"
    );
    let stalls = cs["stalls"].as_array().context("stalls")?;
    for &cpu in &cpus {
        let long: Vec<&Value> = stalls
            .iter()
            .filter(|s| s["cpu"].as_u64() == Some(cpu) && s["ms"].as_f64().unwrap_or(0.0) >= 300.0)
            .collect();
        ensure!(
            long.len() == 1,
            "CPU {cpu}: expected exactly one stall of about 400 ms, got {long:?} ({cs})"
        );
        let ms = long[0]["ms"].as_f64().unwrap_or(0.0);
        ensure!(ms < 2000.0, "CPU {cpu}: a 400 ms stop read as {ms} ms");
        let t = long[0]["t_s"].as_f64().unwrap_or(-1.0);
        // The run's clock starts 0.5 s after the coordinator's start-up; the stop came 1.2 s
        // after launch (negative only if start-up took over 0.7 s).
        ensure!(
            (-0.5..3.0).contains(&t),
            "CPU {cpu}: stall at {t} s into the run"
        );
    }
    ensure!(cs["longest_ms"].as_f64().unwrap_or(0.0) >= 300.0, "{cs}");
    Ok(())
}
