//! Targets beyond loopback: refused unless the operator allows them, and with
//! `USHER_LOADGEN_ALLOW_REMOTE` a gateway named by host name (resolved once) takes a real run.

mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use support::run_bounded;
use usher_testkit::procs::Proc;
use usher_testkit::RedisServer;

fn loadgen() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_usher-loadgen"));
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    cmd
}

#[test]
fn a_remote_target_needs_allow_remote() -> anyhow::Result<()> {
    let mut cmd = loadgen();
    // A documentation address (TEST-NET-1): nothing is ever sent to it.
    cmd.args(["--gateways", "http://192.0.2.10:8080", "--quiet"]);
    let out = run_bounded(cmd, Duration::from_secs(30))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--allow-remote"), "says how: {stderr}");
    let mut cmd = loadgen();
    cmd.args([
        "--gateways",
        "https://192.0.2.10:443",
        "--allow-remote",
        "--quiet",
    ]);
    let out = run_bounded(cmd, Duration::from_secs(30))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "https is refused: {stderr}");
    assert!(stderr.contains("http://"), "{stderr}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_remote_targets_are_resolved_and_loaded() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let env = vec![
        ("USHER_REDIS_URL", redis.url()),
        ("USHER_TICK_MS", "100".to_owned()),
    ];
    let dispatcher = Proc::start("usher-dispatcher", &env).await?;
    let gateway = Proc::start("usher-gateway", &env).await?;
    let r = usher_testkit::config::admin_client()
        .put(format!("{}/admin/queues/remote", dispatcher.url()))
        .json(&json!({"admit_per_second": 200, "passthrough": false}))
        .send()
        .await?;
    anyhow::ensure!(r.status().is_success(), "PUT queue: {}", r.status());
    // By name, as a staging load balancer would be given.
    let named = gateway.url().replace("127.0.0.1", "localhost");
    let dir = tempfile::tempdir()?;
    let report = dir.path().join("r.json");
    let mut cmd = loadgen();
    cmd.env("USHER_LOADGEN_ALLOW_REMOTE", "true")
        .args(["--gateways", &named, "--queue", "remote"])
        .args([
            "--connections",
            "20",
            "--join-rate",
            "100",
            "--duration",
            "60",
        ])
        .args(["--linger-ms", "0", "--until-admitted", "--quiet"])
        .arg("--report")
        .arg(&report);
    let out =
        tokio::task::spawn_blocking(move || run_bounded(cmd, Duration::from_secs(90))).await??;
    anyhow::ensure!(
        out.status.success(),
        "usher-loadgen failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&report)?)?;
    assert_eq!(r["totals"]["admitted"], 20, "{}", r["totals"]);
    assert_eq!(r["correctness"]["ok"], true, "{}", r["correctness"]);
    Ok(())
}
