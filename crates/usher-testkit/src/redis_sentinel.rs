//! A real Redis Sentinel setup per test, plain or TLS: a master, one replica and one sentinel (quorum 1,
//! `down-after-milliseconds` 3 s: shorter, and a busy test machine that stalls the sentinel for a second makes it fail over a healthy master), each a child process on a free loopback port.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use usher_core::store::{RedisArgs, RedisMode};

use crate::redis_server::{binary, cli as cli_binary, free_port, redis_cli as cli, RedisServer};
use crate::tls::TestPki;

/// The name the sentinel knows the master by.
pub const MASTER_NAME: &str = "usher";

/// A master, its replica and a sentinel watching them; all killed when dropped.
pub struct RedisSentinel {
    pub master: RedisServer,
    pub replica: RedisServer,
    sentinel: Child,
    port: u16,
    tls: Option<TlsFiles>,
    _dir: tempfile::TempDir,
}

/// The PEM files of a TLS setup, as paths for configuration files and command lines.
struct TlsFiles {
    ca: String,
    server_cert: String,
    server_key: String,
    client_cert: String,
    client_key: String,
}

impl TlsFiles {
    fn new(pki: &TestPki) -> Self {
        let path = |p: std::path::PathBuf| p.to_string_lossy().into_owned();
        Self {
            ca: path(pki.ca()),
            server_cert: path(pki.server_cert()),
            server_key: path(pki.server_key()),
            client_cert: path(pki.client_cert()),
            client_key: path(pki.client_key()),
        }
    }
}

impl RedisSentinel {
    /// Starts the master, the replica (waits until it has synced) and the sentinel (waits
    /// until it names the master and knows the replica), on plain TCP.
    pub fn start() -> anyhow::Result<Self> {
        Self::start_with(None)
    }

    /// The same over TLS with `pki`'s certificates: every server requires a client certificate
    /// the CA signed; the replica reaches the master and the sentinel reaches both over TLS
    /// (`tls-replication`), so the addresses the sentinel names are the TLS ports. The
    /// sentinel listens on TLS only (`port 0`); the data nodes keep a plain port for the
    /// harness' own readiness checks, which usher is never given.
    pub fn start_tls(pki: &TestPki) -> anyhow::Result<Self> {
        Self::start_with(Some(pki))
    }

    fn start_with(pki: Option<&TestPki>) -> anyhow::Result<Self> {
        let plain = [
            "--save",
            "",
            "--appendonly",
            "no",
            "--repl-diskless-sync-delay",
            "0",
        ];
        let tls = pki.map(TlsFiles::new);
        let node = |extra: &[&str]| -> anyhow::Result<RedisServer> {
            let mut args = plain.to_vec();
            args.extend_from_slice(extra);
            match (pki, &tls) {
                (Some(pki), Some(t)) => {
                    args.extend(["--tls-replication", "yes"]);
                    args.extend(["--tls-client-cert-file", t.client_cert.as_str()]);
                    args.extend(["--tls-client-key-file", t.client_key.as_str()]);
                    RedisServer::start_tls_with(pki, true, &args)
                }
                _ => RedisServer::start_with(&args),
            }
        };
        let master = node(&[])?;
        // The port the replica and the sentinel reach the master on.
        let mp = match &tls {
            Some(_) => master.tls_port(),
            None => master.port(),
        }
        .to_string();
        let replica = node(&["--replicaof", "127.0.0.1", &mp])?;
        wait(Duration::from_secs(20), "the replica to sync", || {
            Ok(cli(replica.port(), &["INFO", "replication"])?.contains("master_link_status:up"))
        })?;
        let dir = tempfile::tempdir()?;
        let port = free_port()?;
        let conf = dir.path().join("sentinel.conf");
        let listen = match &tls {
            Some(t) => format!(
                "port 0\ntls-port {port}\ntls-cert-file {}\ntls-key-file {}\n\
                 tls-ca-cert-file {}\ntls-client-cert-file {}\ntls-client-key-file {}\n\
                 tls-auth-clients yes\ntls-replication yes\n",
                t.server_cert, t.server_key, t.ca, t.client_cert, t.client_key
            ),
            None => format!("port {port}\n"),
        };
        std::fs::write(
            &conf,
            format!(
                "{listen}bind 127.0.0.1\ndir {}\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {mp} 1\n\
                 sentinel down-after-milliseconds {MASTER_NAME} 3000\n\
                 sentinel failover-timeout {MASTER_NAME} 10000\n",
                dir.path().display()
            ),
        )?;
        let sentinel = Command::new(binary())
            .arg(&conf)
            .arg("--sentinel")
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot run redis-server --sentinel")?;
        let s = Self {
            master,
            replica,
            sentinel,
            port,
            tls,
            _dir: dir,
        };
        wait(Duration::from_secs(20), "the sentinel", || {
            Ok(s.sentinel_cli(&["SENTINEL", "REPLICAS", MASTER_NAME])?
                .contains("slave"))
        })?;
        Ok(s)
    }

    /// `redis-cli` on the sentinel (over TLS with the client certificate when it has TLS).
    fn sentinel_cli(&self, args: &[&str]) -> anyhow::Result<String> {
        let Some(t) = &self.tls else {
            return cli(self.port, args);
        };
        let out = Command::new(cli_binary())
            .args([
                "--tls",
                "--cacert",
                t.ca.as_str(),
                "--cert",
                t.client_cert.as_str(),
            ])
            .args(["--key", t.client_key.as_str(), "-h", "127.0.0.1", "-p"])
            .arg(self.port.to_string())
            .args(args)
            .output()
            .context("cannot run redis-cli")?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        anyhow::ensure!(out.status.success(), "redis-cli {args:?} failed: {text}");
        Ok(text)
    }

    /// usher's settings: sentinel mode through this sentinel (`rediss+sentinel://` with the
    /// CA and the client certificate when it has TLS).
    pub fn redis_args(&self) -> RedisArgs {
        let scheme = if self.tls.is_some() {
            "rediss+sentinel"
        } else {
            "redis+sentinel"
        };
        let mut args = RedisArgs {
            mode: RedisMode::Sentinel,
            ..RedisArgs::standalone(format!("{scheme}://127.0.0.1:{}/{MASTER_NAME}", self.port))
        };
        if let Some(t) = &self.tls {
            args.ca_file = Some(t.ca.clone().into());
            args.client_cert = Some(t.client_cert.clone().into());
            args.client_key = Some(t.client_key.clone().into());
        }
        args
    }

    /// The port of the master the sentinel names now (its TLS port when it has TLS).
    pub fn master_port(&self) -> anyhow::Result<u16> {
        let out = self.sentinel_cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME])?;
        Ok(out
            .lines()
            .nth(1)
            .context("no master address")?
            .trim()
            .parse()?)
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

/// Polls `cond` every 50 ms until it holds, at most `within`.
fn wait(
    within: Duration,
    what: &str,
    mut cond: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if cond().unwrap_or(false) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("timed out waiting for {what}")
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        let _ = self.sentinel.kill();
        let _ = self.sentinel.wait();
    }
}
