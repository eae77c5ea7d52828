//! A gateway refuses to start with a cap set above its open-files limit (issue 26): a cap the
//! process cannot reach would end in `EMFILE` at `accept` instead of the cap's `retry:`. Caps
//! left at their defaults are lowered to fit instead, so the defaults start anywhere.
//! `prlimit` sets both limits, so raising the soft one gains nothing; the check runs before
//! anything connects (no Redis needed).

use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;
use usher_testkit::procs::binary;

/// The gateway under an open-files limit of 1,000 with `env` (and no Redis to reach).
fn gateway_under_1000_files_command(env: &[(&str, &str)]) -> anyhow::Result<Command> {
    let mut cmd = Command::new("prlimit");
    cmd.arg("--nofile=1000:1000")
        .arg(binary("usher-gateway")?)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("USHER_LISTEN", "127.0.0.1:0")
        .env("USHER_REDIS_URL", "redis://127.0.0.1:1")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    Ok(cmd)
}

/// Runs the gateway under an open-files limit of 1,000 with `env`; its exit status and stderr.
async fn gateway_under_1000_files(env: &[(&str, &str)]) -> anyhow::Result<(bool, String)> {
    let mut cmd = gateway_under_1000_files_command(env)?;
    let out = cmd.output();
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
    // A streams cap set above the limit is refused, named first.
    let (ok, stderr) = gateway_under_1000_files(&[("USHER_MAX_CONNECTIONS", "18000")]).await?;
    assert!(!ok, "refused: {stderr}");
    assert!(
        stderr.contains(
            "USHER_MAX_CONNECTIONS = 18000 is above this process's open-files limit of 1000"
        ),
        "{stderr}"
    );
    // Streams within the limit, sockets set above it.
    let (ok, stderr) = gateway_under_1000_files(&[
        ("USHER_MAX_CONNECTIONS", "900"),
        ("USHER_MAX_SOCKETS", "20000"),
    ])
    .await?;
    assert!(!ok, "refused: {stderr}");
    assert!(
        stderr
            .contains("USHER_MAX_SOCKETS = 20000 is above this process's open-files limit of 1000"),
        "{stderr}"
    );
    assert!(!stderr.contains("USHER_MAX_CONNECTIONS ="), "{stderr}");
    Ok(())
}

/// Caps left at their defaults (18,000 streams, 20,000 sockets) are lowered to fit a small
/// limit, with a warning, so the defaults start on any machine: the gateway goes on to
/// serve (here it waits for a Redis that never answers) instead of exiting.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_lowers_default_caps_to_fit_its_open_files_limit() -> anyhow::Result<()> {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut child = gateway_under_1000_files_command(&[])?
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut lines = BufReader::new(stdout).lines();
    let mut warnings = Vec::new();
    let read = async {
        while let Some(line) = lines.next_line().await? {
            if line.contains("lowered from its default") {
                warnings.push(line);
                if warnings.len() == 2 {
                    break;
                }
            }
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .map_err(|_| anyhow::anyhow!("no warnings in 30 s: {warnings:?}"))??;
    assert!(
        warnings[0].contains("USHER_MAX_SOCKETS lowered from its default 20000 to 900")
            && warnings[1].contains("USHER_MAX_CONNECTIONS lowered from its default 18000 to 810"),
        "{warnings:?}"
    );
    assert!(
        child.try_wait()?.is_none(),
        "the gateway goes on after lowering its caps"
    );
    child.kill().await?;
    Ok(())
}
