//! Helpers shared by the integration tests.

use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};

/// Runs `cmd` (usher-loadgen) to completion, killing it after `timeout`.
pub fn run_bounded(mut cmd: Command, timeout: Duration) -> anyhow::Result<std::process::Output> {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start usher-loadgen")?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(out) => Ok(out?),
        Err(_) => {
            // Its workers exit by themselves when its pipes close.
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            bail!("usher-loadgen did not finish within {timeout:?}")
        }
    }
}
