//! A real Redis Sentinel setup per test: a master, one replica and one sentinel (quorum 1,
//! `down-after-milliseconds` 3 s: shorter, and a busy test machine that stalls the sentinel for a second makes it fail over a healthy master), each a child process on a free loopback port.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use usher_core::store::{RedisArgs, RedisMode};

use crate::redis_server::{binary, free_port, ping, redis_cli as cli, RedisServer};

/// The name the sentinel knows the master by.
pub const MASTER_NAME: &str = "usher";

/// A master, its replica and a sentinel watching them; all killed when dropped.
pub struct RedisSentinel {
    pub master: RedisServer,
    pub replica: RedisServer,
    sentinel: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl RedisSentinel {
    /// Starts the master, the replica (waits until it has synced) and the sentinel (waits
    /// until it names the master and knows the replica).
    pub fn start() -> anyhow::Result<Self> {
        let plain = [
            "--save",
            "",
            "--appendonly",
            "no",
            "--repl-diskless-sync-delay",
            "0",
        ];
        let master = RedisServer::start_with(&plain)?;
        let mp = master.port().to_string();
        let mut replica_args = plain.to_vec();
        replica_args.extend(["--replicaof", "127.0.0.1", &mp]);
        let replica = RedisServer::start_with(&replica_args)?;
        wait(Duration::from_secs(20), "the replica to sync", || {
            Ok(cli(replica.port(), &["INFO", "replication"])?.contains("master_link_status:up"))
        })?;
        let dir = tempfile::tempdir()?;
        let port = free_port()?;
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {mp} 1\n\
                 sentinel down-after-milliseconds {MASTER_NAME} 3000\n\
                 sentinel failover-timeout {MASTER_NAME} 10000\n",
                dir.path().display()
            ),
        )?;
        let sentinel = Command::new(binary())
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot run redis-server --sentinel")?;
        let s = Self {
            master,
            replica,
            sentinel,
            port,
            _dir: dir,
        };
        wait(Duration::from_secs(20), "the sentinel", || {
            Ok(ping(port) && cli(port, &["SENTINEL", "REPLICAS", MASTER_NAME])?.contains("slave"))
        })?;
        Ok(s)
    }

    /// usher's settings: sentinel mode through this sentinel.
    pub fn redis_args(&self) -> RedisArgs {
        RedisArgs {
            mode: RedisMode::Sentinel,
            ..RedisArgs::standalone(format!(
                "redis+sentinel://127.0.0.1:{}/{MASTER_NAME}",
                self.port
            ))
        }
    }

    /// The port of the master the sentinel names now.
    pub fn master_port(&self) -> anyhow::Result<u16> {
        let out = cli(
            self.port,
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME],
        )?;
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
