//! Process-level settings of the real binaries.

use usher_testkit::procs::Proc;
use usher_testkit::wait::eventually_within;
use usher_testkit::RedisServer;

/// `THP_enabled` from `/proc/<pid>/status`: whether transparent huge pages may back this
/// process' memory.
fn thp_enabled(pid: u32) -> anyhow::Result<bool> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .ok_or_else(|| anyhow::anyhow!("no THP_enabled in /proc/{pid}/status (kernel < 5.0?)"))?;
    Ok(line.trim() != "0")
}

/// Huge pages made the kernel zero 2 MiB at a time as connections came and went (a quarter of
/// the gateways' CPU time at 10,000 joins/s, BENCHMARKS.md): both servers turn them off.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_run_without_transparent_huge_pages() -> anyhow::Result<()> {
    assert!(
        thp_enabled(std::process::id())?,
        "a process that does not turn them off may use them (the check itself works)"
    );
    let redis = RedisServer::start()?;
    let env = [("USHER_REDIS_URL", redis.url())];
    let dispatcher = Proc::start("usher-dispatcher", &env).await?;
    let gateway = Proc::start("usher-gateway", &env).await?;
    assert!(!thp_enabled(dispatcher.pid())?, "dispatcher");
    assert!(!thp_enabled(gateway.pid())?, "gateway");
    Ok(())
}

/// `--help` shows each flag's environment variable, and clap would print its current value
/// too: a Redis URL can carry a password, and the keys and the admin token are secrets, so
/// `--help` never prints those values (a support session pasting `--help` output leaks none).
#[test]
fn help_never_prints_secret_values() -> anyhow::Result<()> {
    const SECRET: &str = "s3cr3t-do-not-print";
    let secrets = [
        (
            "USHER_REDIS_URL",
            format!("redis://app:{SECRET}@127.0.0.1:1"),
        ),
        ("USHER_ADMIN_TOKEN", SECRET.to_owned()),
        ("USHER_JWT_KEY", SECRET.to_owned()),
        ("USHER_TICKET_KEY", SECRET.to_owned()),
    ];
    for name in ["usher-dispatcher", "usher-gateway"] {
        let out = std::process::Command::new(usher_testkit::procs::binary(name)?)
            .arg("--help")
            .envs(secrets.iter().map(|(k, v)| (k, v)))
            .output()?;
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{name} --help exits 0");
        assert!(
            help.contains("USHER_REDIS_URL"),
            "{name} --help names its variables"
        );
        assert!(
            !help.contains(SECRET),
            "{name} --help printed a secret:\n{help}"
        );
    }
    Ok(())
}

/// `/readyz` fails for the gateway's own reasons only: while it drains (so the load balancer
/// sends it no new browsers), never because Redis is away (see `outage.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_gateway_is_not_ready() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let env = [
        ("USHER_REDIS_URL", redis.url()),
        // Long, so a loaded machine sees the 503 well before the listener closes.
        ("USHER_DRAIN_DELAY_MS", "8000".to_owned()),
        ("USHER_DRAIN_SECS", "1".to_owned()),
    ];
    let mut gateway = Proc::start("usher-gateway", &env).await?;
    let http = reqwest::Client::new();
    let readyz = format!("{}/readyz", gateway.url());
    assert_eq!(http.get(&readyz).send().await?.status(), 200);
    gateway.term()?;
    // The listener stays open for the drain delay, answering readiness checks with 503.
    eventually_within(
        "a draining gateway to answer /readyz with 503",
        std::time::Duration::from_secs(6),
        async || {
            let status = http.get(&readyz).send().await?.status();
            anyhow::ensure!(status == 503, "{status}");
            Ok(())
        },
    )
    .await?;
    assert!(
        gateway
            .wait_exit(std::time::Duration::from_secs(30))
            .await?,
        "the gateway exits after its drain"
    );
    Ok(())
}
