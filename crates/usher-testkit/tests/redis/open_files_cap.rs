//! A gateway refuses to start with a cap above its open-files limit (issue 26): a cap the
//! process cannot reach would end in `EMFILE` at `accept` instead of the cap's `retry:`.
//! `prlimit` sets both limits, so raising the soft one gains nothing; the check runs before
//! anything connects (no Redis needed).

use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;
use usher_testkit::procs::binary;

/// Runs the gateway under an open-files limit of 1,000 with `env`; its exit status and stderr.
async fn gateway_under_1000_files(env: &[(&str, &str)]) -> anyhow::Result<(bool, String)> {
    let out = Command::new("prlimit")
        .arg("--nofile=1000:1000")
        .arg(binary("usher-gateway")?)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("USHER_LISTEN", "127.0.0.1:0")
        .env("USHER_REDIS_URL", "redis://127.0.0.1:1")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), out)
        .await
        .map_err(|_| anyhow::anyhow!("the gateway started instead of refusing"))??;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_refuses_caps_above_its_open_files_limit() -> anyhow::Result<()> {
    // The defaults (18,000 streams, 20,000 sockets): the streams' cap is named first.
    let (ok, stderr) = gateway_under_1000_files(&[]).await?;
    assert!(!ok, "refused: {stderr}");
    assert!(
        stderr.contains(
            "USHER_MAX_CONNECTIONS = 18000 is above this process's open-files limit of 1000"
        ),
        "{stderr}"
    );
    // Streams within the limit, sockets above it.
    let (ok, stderr) = gateway_under_1000_files(&[("USHER_MAX_CONNECTIONS", "900")]).await?;
    assert!(!ok, "refused: {stderr}");
    assert!(
        stderr
            .contains("USHER_MAX_SOCKETS = 20000 is above this process's open-files limit of 1000"),
        "{stderr}"
    );
    assert!(!stderr.contains("USHER_MAX_CONNECTIONS ="), "{stderr}");
    Ok(())
}
