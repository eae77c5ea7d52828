//! A real `redis-server` child process per test, on a free port, in a temporary directory.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// The `redis-server` binary to run: `$USHER_REDIS_SERVER` or `redis-server` from `PATH`.
pub fn binary() -> String {
    std::env::var("USHER_REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned())
}

/// The `redis-cli` binary: `$USHER_REDIS_CLI` or `redis-cli` from `PATH`.
pub fn cli() -> String {
    std::env::var("USHER_REDIS_CLI").unwrap_or_else(|_| "redis-cli".to_owned())
}

/// Runs `redis-cli -p <port> <args>` against a loopback server; its output, or an error when
/// it fails or Redis answers an error.
pub fn redis_cli(port: u16, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(cli())
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .with_context(|| format!("cannot run {} (install redis-tools)", cli()))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    anyhow::ensure!(
        out.status.success() && !text.starts_with("ERR") && !text.starts_with("(error)"),
        "redis-cli {args:?} failed: {text}"
    );
    Ok(text)
}

/// A running `redis-server`; killed when dropped.
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
    args: Vec<String>,
    /// The TLS port, for a server started with [`RedisServer::start_tls`].
    tls_port: Option<u16>,
    /// Killed by [`RedisServer::kill`] and not started again.
    killed: bool,
}

pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The `process_id` of the Redis server answering on `port` (`INFO server`), if one answers.
fn server_pid(port: u16) -> Option<u32> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(b"INFO server\r\n").ok()?;
    let mut buf = vec![0u8; 16 * 1024];
    let mut len = 0;
    while len < buf.len() {
        match s.read(&mut buf[len..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => len += n,
        }
        let text = String::from_utf8_lossy(&buf[..len]);
        if let Some(rest) = text.split("process_id:").nth(1) {
            if let Some(pid) = rest.split("\r\n").next() {
                if rest.contains("\r\n") {
                    return pid.trim().parse().ok();
                }
            }
        }
    }
    None
}

impl RedisServer {
    /// Starts a server without persistence.
    pub fn start() -> anyhow::Result<Self> {
        Self::start_with(&["--save", "", "--appendonly", "no"])
    }

    /// The Redis at `url` when one is given, else a server started here (without persistence)
    /// and kept alive by the returned handle: the start of the bench tools that measure against
    /// a given Redis or their own.
    pub fn given_or_own(url: Option<&str>) -> anyhow::Result<(Option<Self>, String)> {
        Ok(match url {
            Some(u) => (None, u.to_string()),
            None => {
                let own = Self::start()?;
                let u = own.url();
                (Some(own), u)
            }
        })
    }

    /// Starts a server with extra arguments (e.g. `--appendonly yes`).
    pub fn start_with(extra: &[&str]) -> anyhow::Result<Self> {
        Self::start_with_fresh(|| Ok(extra.iter().map(|a| a.to_string()).collect()))
    }

    /// Starts a server with extra arguments made afresh for each try: each of up to five tries
    /// takes a port just found free, which another process may take before the server binds
    /// it, and arguments that name ports of their own (a cluster node's bus port) must be
    /// chosen again with it.
    pub(crate) fn start_with_fresh(
        extra: impl Fn() -> anyhow::Result<Vec<String>>,
    ) -> anyhow::Result<Self> {
        let mut last_err = None;
        for _ in 0..5 {
            let args = extra()?;
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            match Self::try_start(&args) {
                Ok(s) => return Ok(s),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow::anyhow!("redis-server did not start")))
    }

    /// Starts a server that also listens for TLS (certificates from `pki`; clients must show
    /// a certificate the CA signed when `auth_clients`). The plain port stays open for the
    /// harness (readiness, probes); usher under test is given [`RedisServer::tls_url`].
    pub fn start_tls(pki: &crate::tls::TestPki, auth_clients: bool) -> anyhow::Result<Self> {
        Self::start_tls_with(pki, auth_clients, &[])
    }

    /// [`RedisServer::start_tls`] with extra server arguments (e.g. `--tls-replication yes`).
    pub fn start_tls_with(
        pki: &crate::tls::TestPki,
        auth_clients: bool,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        let tls_port = free_port()?;
        let path = |p: std::path::PathBuf| p.to_string_lossy().into_owned();
        let mut args = [
            "--save".to_owned(),
            String::new(),
            "--appendonly".to_owned(),
            "no".to_owned(),
            "--tls-port".to_owned(),
            tls_port.to_string(),
            "--tls-cert-file".to_owned(),
            path(pki.server_cert()),
            "--tls-key-file".to_owned(),
            path(pki.server_key()),
            "--tls-ca-cert-file".to_owned(),
            path(pki.ca()),
            "--tls-auth-clients".to_owned(),
            if auth_clients { "yes" } else { "no" }.to_owned(),
        ]
        .to_vec();
        args.extend(extra.iter().map(|a| a.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut server = Self::start_with(&args)?;
        server.tls_port = Some(tls_port);
        Ok(server)
    }

    fn try_start(extra: &[&str]) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let port = free_port()?;
        let args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let child = spawn(port, dir.path(), &args)?;
        let mut server = Self {
            child,
            port,
            dir,
            args,
            tls_port: None,
            killed: false,
        };
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            // Our own child, not another test's server that took the same free port between
            // `free_port` and our bind (ours then exits with "address in use").
            if server_pid(self.port) == Some(self.child.id()) {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                bail!("redis-server exited early ({status}) on port {}", self.port);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        bail!("redis-server did not answer PING on port {}", self.port)
    }

    /// Kills the server (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.killed = true;
    }

    /// Whether [`RedisServer::kill`] stopped it (and it was not started again).
    pub fn is_killed(&self) -> bool {
        self.killed
    }

    /// Stops the server gracefully (SIGTERM: Redis flushes its AOF and exits) and waits.
    pub fn stop_graceful(&mut self) -> anyhow::Result<()> {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()?;
        anyhow::ensure!(status.success(), "kill -TERM failed");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        bail!("redis-server did not stop within 10 s of SIGTERM")
    }

    /// Starts the server again after [`RedisServer::stop_graceful`] (same port and directory).
    pub fn start_again(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            self.child = spawn(self.port, self.dir.path(), &self.args)?;
            match self.wait_ready() {
                Ok(()) => {
                    self.killed = false;
                    return Ok(());
                }
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Kills the server and starts it again on the same port and directory (so AOF/RDB files
    /// are reloaded).
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        self.start_again()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `rediss://127.0.0.1:<tls port>` (a server from [`RedisServer::start_tls`]; panics
    /// otherwise, a bug in the test).
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port())
    }

    /// The TLS port (a server from [`RedisServer::start_tls`]; panics otherwise, a bug in the
    /// test).
    pub fn tls_port(&self) -> u16 {
        self.tls_port.expect("server started with start_tls")
    }

    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

fn spawn(port: u16, dir: &std::path::Path, extra: &[String]) -> anyhow::Result<Child> {
    Command::new(binary())
        .arg("--port")
        .arg(port.to_string())
        .args([
            "--bind",
            "127.0.0.1",
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
        ])
        .arg("--dir")
        .arg(dir)
        .args(extra)
        // Run in the temporary directory too: a snapshot or AOF written anywhere relative
        // (a `dir` set to "." by an argument, a `SAVE` on shutdown) stays out of the checkout.
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| {
            format!(
                "cannot run {} (install redis-server, or set USHER_REDIS_SERVER)",
                binary()
            )
        })
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
