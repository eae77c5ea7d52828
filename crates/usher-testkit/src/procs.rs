//! usher binaries as real child processes, for tests that kill, signal and restart them.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// The debug binary `name` of this workspace (`target/debug/<name>`), built with
/// `cargo build` when missing (`make test` builds all binaries first).
pub fn binary(name: &str) -> anyhow::Result<PathBuf> {
    let dir = match std::env::var_os("USHER_BIN_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            // target/debug/deps/<test binary> → target/debug
            let exe = std::env::current_exe()?;
            exe.parent()
                .and_then(Path::parent)
                .map(Path::to_path_buf)
                .context("cannot locate the target directory")?
        }
    };
    let path = dir.join(name);
    if !path.exists() {
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--workspace", "--bins"])
            .status()
            .context("cannot run cargo to build a test binary")?;
        if !status.success() || !path.exists() {
            bail!(
                "{name} is not built at {} (run `cargo build --workspace --bins`)",
                path.display()
            );
        }
    }
    Ok(path)
}

/// A free loopback address (bound and released; the port is picked by the OS).
pub fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// A running usher binary; killed when dropped.
pub struct Proc {
    pub name: String,
    pub addr: SocketAddr,
    child: Child,
    log: PathBuf,
    args: Vec<(String, String)>,
    bin: PathBuf,
    _dir: tempfile::TempDir,
}

impl Proc {
    /// Starts `name` listening on a free port with `env` (`USHER_LISTEN` is set here) and
    /// waits until `/readyz` answers 200.
    pub async fn start(name: &str, env: &[(&str, String)]) -> anyhow::Result<Self> {
        let bin = binary(name)?;
        let dir = tempfile::tempdir()?;
        let log = dir.path().join(format!("{name}.log"));
        let addr = free_addr()?;
        let args: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let child = spawn(&bin, addr, &args, &log)?;
        let mut p = Self {
            name: name.to_owned(),
            addr,
            child,
            log,
            args,
            bin,
            _dir: dir,
        };
        p.wait_ready(Duration::from_secs(20)).await?;
        Ok(p)
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let http = reqwest::Client::new();
        let what = format!("{} to answer /readyz", self.name);
        // `Some(Err)` stops the wait at once: the process exited.
        let ready = crate::wait::eventually_within(&what, timeout, async || {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(Err(anyhow::anyhow!(
                    "{} exited ({status}) during startup",
                    self.name
                )));
            }
            http.get(format!("{}/readyz", self.url()))
                .timeout(Duration::from_millis(500))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
                .then_some(Ok(()))
        })
        .await
        .and_then(|r| r);
        ready.map_err(|e| anyhow::anyhow!("{e:#}:\n{}", self.log_tail()))
    }

    /// SIGKILL, as a crash would.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM (a graceful stop); does not wait.
    pub fn term(&self) -> anyhow::Result<()> {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()?;
        anyhow::ensure!(status.success(), "kill -TERM failed");
        Ok(())
    }

    /// Waits for the process to exit; returns whether it exited successfully.
    pub async fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<bool> {
        let what = format!("{} to exit", self.name);
        // `Some(Err)` stops the wait at once: the status could not be read.
        let status = crate::wait::eventually_within(&what, timeout, async || {
            self.child.try_wait().transpose()
        });
        Ok(status.await??.success())
    }

    /// Starts the same binary again with the same settings and address.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.kill9();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            self.child = spawn(&self.bin, self.addr, &self.args, &self.log)?;
            match self.wait_ready(Duration::from_secs(20)).await {
                Ok(()) => return Ok(()),
                // The port may still be held for a moment.
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => {
                    self.kill9();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// The whole log of the process so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last lines of the process's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

fn spawn(
    bin: &Path,
    addr: SocketAddr,
    env: &[(String, String)],
    log: &Path,
) -> anyhow::Result<Child> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let err = out.try_clone()?;
    Command::new(bin)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env(
            "RUST_LOG",
            std::env::var("USHER_TEST_LOG").unwrap_or_else(|_| "info".into()),
        )
        .env("USHER_LISTEN", addr.to_string())
        .envs(default_admin_token(env))
        .envs(PER_IP_LIMITS_OFF)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .with_context(|| format!("cannot start {}", bin.display()))
}

/// Tests burst from one loopback address, so a test gateway process has the per-IP limits off
/// unless the test sets them (its own variables come after these and win), like the in-process
/// configs of [`crate::config`]. Other binaries ignore them.
const PER_IP_LIMITS_OFF: [(&str, &str); 5] = [
    ("USHER_IP_JOIN_RATE", "0"),
    ("USHER_IP_JOIN_BURST", "0"),
    ("USHER_IP_MAX_STREAMS", "0"),
    ("USHER_IP_MAX_PLACES", "0"),
    ("USHER_IP_MAX_SOCKETS", "0"),
];

/// Every test dispatcher gets the test admin token ([`crate::config::admin_token_spec`]),
/// unless the test sets `USHER_ADMIN_TOKEN` itself or `USHER_DEV` (development mode, whose
/// token is shared through Redis).
fn default_admin_token(env: &[(String, String)]) -> Option<(&'static str, String)> {
    let chosen = env
        .iter()
        .any(|(k, _)| k == "USHER_ADMIN_TOKEN" || k == "USHER_DEV");
    (!chosen).then(|| ("USHER_ADMIN_TOKEN", crate::config::admin_token_spec()))
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}
