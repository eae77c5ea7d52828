//! `--leave-per-minute` on a real stack: browsers whose patience runs out leave the line
//! with `DELETE /api/queues/{queue}/tickets/{ticket}`, and the line in Redis is exactly the
//! browsers that joined less those the load generator says left.

mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use support::run_bounded;
use usher_testkit::procs::Proc;
use usher_testkit::RedisServer;

const TICKET_KEY: &str = "loadgen-leave-ticket-key-0123456789abcdef";
const CONNECTIONS: u64 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browsers_out_of_patience_leave_the_line() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let env = [
        ("USHER_REDIS_URL", redis.url()),
        ("USHER_TICK_MS", "100".to_owned()),
        ("USHER_TICKET_KEY", TICKET_KEY.to_owned()),
    ];
    let dispatcher = Proc::start("usher-dispatcher", &env).await?;
    let mut gw_env = env.to_vec();
    gw_env.push(("USHER_SERVER_ID", "g0".to_owned()));
    let g0 = Proc::start("usher-gateway", &gw_env).await?;
    let http = usher_testkit::config::admin_client();
    // Paused: nobody is admitted, so everyone waits until they leave or the run ends.
    let r = http
        .put(format!("{}/admin/queues/leaving", dispatcher.url()))
        .json(&json!({"admit_per_second": 10, "paused": true}))
        .timeout(Duration::from_secs(5))
        .send()
        .await?;
    anyhow::ensure!(r.status().is_success(), "PUT queue: {}", r.status());

    let dir = tempfile::tempdir()?;
    let report = dir.path().join("r.json");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_usher-loadgen"));
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .args(["--gateways", &g0.url(), "--queue", "leaving"])
        .args([
            "--connections",
            &CONNECTIONS.to_string(),
            "--join-rate",
            "200",
        ])
        // Nearly everyone a minute: a median patience of about three seconds.
        .args(["--leave-per-minute", "0.999999", "--seed", "3"])
        .args(["--duration", "4", "--linger-ms", "0", "--quiet"])
        .arg("--report")
        .arg(&report);
    let out =
        tokio::task::spawn_blocking(move || run_bounded(cmd, Duration::from_secs(60))).await??;
    anyhow::ensure!(
        out.status.success(),
        "usher-loadgen failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        g0.log_tail()
    );
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&report)?)?;
    let t = &r["totals"];
    assert_eq!(t["joined"], CONNECTIONS, "{t}");
    let left = t["left"].as_u64().unwrap_or(0);
    assert!(left > 0 && left < CONNECTIONS, "{t}");
    assert_eq!(r["errors"], json!({}), "{r}");
    // Those who left are out of the line; the others (away now, within their grace) are not.
    let q: Value = http
        .get(format!("{}/admin/queues/leaving", dispatcher.url()))
        .timeout(Duration::from_secs(5))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(q["waiting"].as_u64(), Some(CONNECTIONS - left), "{q}");
    drop((g0, dispatcher, redis));
    Ok(())
}
