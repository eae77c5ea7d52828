//! The load generator on a proof-of-work queue: every connection is refused once with
//! `event: challenge`, solves the puzzle in Rust and joins with the solution; everyone is
//! admitted, in order, exactly once.

mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use support::run_bounded;
use usher_testkit::procs::Proc;
use usher_testkit::RedisServer;

const CONNECTIONS: u64 = 60;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_generator_solves_proof_of_work_and_joins() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let env = vec![
        ("USHER_REDIS_URL", redis.url()),
        ("USHER_TICK_MS", "100".to_owned()),
        ("USHER_RETRY_MS", "300".to_owned()),
    ];
    let dispatcher = Proc::start("usher-dispatcher", &env).await?;
    let gateway = Proc::start("usher-gateway", &env).await?;
    let http = usher_testkit::config::admin_client();
    let r = http
        .put(format!("{}/admin/queues/pow", dispatcher.url()))
        .json(&json!({"admit_per_second": 100, "passthrough": false,
            "challenge": "pow", "pow_difficulty": 10}))
        .timeout(Duration::from_secs(5))
        .send()
        .await?;
    anyhow::ensure!(r.status().is_success(), "PUT queue: {}", r.status());

    let dir = tempfile::tempdir()?;
    let report = dir.path().join("r.json");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_usher-loadgen"));
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .args(["--gateways", &gateway.url()])
        .args(["--queue", "pow"])
        .args(["--connections", &CONNECTIONS.to_string()])
        .args(["--join-rate", "200"])
        .args(["--duration", "60"])
        .arg("--until-admitted")
        .arg("--report")
        .arg(&report)
        .arg("--quiet");
    let out =
        tokio::task::spawn_blocking(move || run_bounded(cmd, Duration::from_secs(120))).await??;
    let stdout = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(
        out.status.success(),
        "usher-loadgen failed ({}):\n{stdout}\n{}\ngateway:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        gateway.log_tail()
    );
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&report)?)?;
    let t = &r["totals"];
    assert_eq!(t["joined"], CONNECTIONS, "{t}");
    assert_eq!(t["admitted"], CONNECTIONS, "{t}");
    // Each connection came without a solution first (the load generator does not fetch the
    // puzzle ahead), and solved at least one puzzle of about 2^10 hashes.
    assert!(t["challenges"].as_u64() >= Some(CONNECTIONS), "{t}");
    assert!(t["pow_hashes"].as_u64() >= Some(CONNECTIONS), "{t}");
    let c = &r["correctness"];
    assert_eq!(c["duplicate_admissions"], 0, "{c}");
    assert_eq!(c["ok"], true, "{c}");
    drop((gateway, dispatcher, redis));
    Ok(())
}
