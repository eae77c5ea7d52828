//! A real Redis Cluster per test: 3 masters and 3 replicas (or another shape, e.g. masters
//! only for a benchmark), each a `redis-server` child process on a free loopback port,
//! joined with `redis-cli --cluster create`.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use usher_core::store::RedisArgs;

use crate::redis_server::{cli, free_port, redis_cli, RedisServer};

/// A running cluster; every node is killed when dropped.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts six nodes (with `extra` server arguments each), creates the cluster with one
    /// replica per master, and waits until every node reports `cluster_state:ok` and knows
    /// all six.
    pub fn start(extra: &[&str]) -> anyhow::Result<Self> {
        Self::start_shaped(3, 1, extra)
    }

    /// Starts `masters` masters with `replicas` replicas each (`masters` ≥ 3, Redis Cluster's
    /// minimum), as [`RedisCluster::start`] does.
    pub fn start_shaped(masters: usize, replicas: usize, extra: &[&str]) -> anyhow::Result<Self> {
        let count = masters * (1 + replicas);
        let mut nodes = Vec::with_capacity(count);
        for _ in 0..count {
            nodes.push(start_node(extra)?);
        }
        let cluster = Self { nodes };
        let addrs: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let out = Command::new(cli())
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .with_context(|| format!("cannot run {} (install redis-tools)", cli()))?;
        ensure!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.wait_ok(Duration::from_secs(30))?;
        Ok(cluster)
    }

    /// Waits until every live node answers `cluster_state:ok` and knows every node, and every
    /// replica's link to its master is up.
    pub fn wait_ok(&self, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            let pending: Vec<u16> = self
                .nodes
                .iter()
                .filter(|n| !n.is_killed())
                .map(RedisServer::port)
                .filter(|&p| !node_ok(p, self.nodes.len()))
                .collect();
            if pending.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("cluster nodes {pending:?} not ok within {within:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The seed URLs of every node, as `USHER_REDIS_URL` lists them.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Cluster-mode settings for usher, seeded with every node.
    pub fn redis_args(&self) -> RedisArgs {
        RedisArgs::cluster(&self.urls())
    }

    /// A `redis-cli` command on the node on `port`.
    pub fn cli_on(&self, port: u16, args: &[&str]) -> anyhow::Result<String> {
        redis_cli(port, args)
    }

    /// The node serving `key` as master (by `CLUSTER KEYSLOT` and `CLUSTER NODES`).
    pub fn master_of(&mut self, key: &str) -> anyhow::Result<&mut RedisServer> {
        let port = self.master_port_of(key)?;
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .context("master of the slot is not one of our nodes")
    }

    /// The port of the master serving `key`'s slot.
    pub fn master_port_of(&self, key: &str) -> anyhow::Result<u16> {
        let seed = self
            .nodes
            .iter()
            .find(|n| !n.is_killed())
            .context("no live node")?;
        let slot: u16 = self
            .cli_on(seed.port(), &["CLUSTER", "KEYSLOT", key])?
            .trim()
            .parse()?;
        let nodes = self.cli_on(seed.port(), &["CLUSTER", "NODES"])?;
        for line in nodes.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 9 || !f[2].contains("master") || f[2].contains("fail") {
                continue;
            }
            let serves = f[8..].iter().any(|r| match r.split_once('-') {
                Some((a, b)) => {
                    a.parse().is_ok_and(|a: u16| a <= slot)
                        && b.parse().is_ok_and(|b: u16| slot <= b)
                }
                None => r.parse() == Ok(slot),
            });
            if serves {
                let port = f[1].split(['@', ':']).nth(1).context("node address")?;
                return Ok(port.parse()?);
            }
        }
        bail!("no master serves slot {slot}:\n{nodes}")
    }
}

/// One cluster node. Its bus port is chosen explicitly (`--cluster-port`): the default, the
/// port + 10000, can fall outside the port range for a high ephemeral port. It is chosen
/// afresh for each try, as the node's own port is: a bus port another process took between
/// `free_port` and the node's bind fails that try only, not all of them (seen once in CI).
fn start_node(extra: &[&str]) -> anyhow::Result<RedisServer> {
    RedisServer::start_with_fresh(|| {
        let bus = free_port()?.to_string();
        let mut args: Vec<String> = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "1000",
            "--cluster-port",
            &bus,
            // Replicas sync at once (the default waits 5 s for more replicas): a replica that
            // has not synced yet cannot take over from its master.
            "--repl-diskless-sync-delay",
            "0",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        args.extend(extra.iter().map(|a| a.to_string()));
        Ok(args)
    })
}

/// Whether the node on `port` reports `cluster_state:ok`, knows all `nodes` nodes and, if it
/// is a replica, has synced with its master.
fn node_ok(port: u16, nodes: usize) -> bool {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}")) else {
        return false;
    };
    let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(500)) else {
        return false;
    };
    let info: String = match redis::cmd("CLUSTER").arg("INFO").query(&mut c) {
        Ok(i) => i,
        Err(_) => return false,
    };
    let repl: String = match redis::cmd("INFO").arg("replication").query(&mut c) {
        Ok(i) => i,
        Err(_) => return false,
    };
    let synced = repl.contains("role:master") || repl.contains("master_link_status:up");
    synced
        && info.contains("cluster_state:ok")
        && info.contains(&format!("cluster_known_nodes:{nodes}"))
}

impl RedisCluster {
    /// The node id of the node on `port` (`CLUSTER MYID`).
    pub fn node_id(&self, port: u16) -> anyhow::Result<String> {
        Ok(self.cli_on(port, &["CLUSTER", "MYID"])?.trim().to_owned())
    }

    /// Ports of the live masters.
    pub fn master_ports(&self) -> anyhow::Result<Vec<u16>> {
        let mut out = Vec::new();
        for n in self.nodes.iter().filter(|n| !n.is_killed()) {
            if self.cli_on(n.port(), &["ROLE"])?.starts_with("master") {
                out.push(n.port());
            }
        }
        Ok(out)
    }

    /// Moves `slot` from the master on `from` to the master on `to` the way `redis-cli
    /// --cluster reshard` does (`CLUSTER SETSLOT … IMPORTING/MIGRATING`, `MIGRATE` in batches
    /// of `batch` keys, `CLUSTER SETSLOT … NODE` on every master), pausing `pause` between
    /// batches so clients meet the slot half moved (`ASK`, `TRYAGAIN`). Returns the keys moved.
    pub fn migrate_slot(
        &self,
        slot: u16,
        from: u16,
        to: u16,
        batch: usize,
        pause: Duration,
    ) -> anyhow::Result<usize> {
        let (from_id, to_id) = (self.node_id(from)?, self.node_id(to)?);
        let slot_s = slot.to_string();
        self.cli_on(to, &["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &from_id])?;
        self.cli_on(from, &["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &to_id])?;
        let mut moved = 0;
        loop {
            let keys = self.cli_on(
                from,
                &["CLUSTER", "GETKEYSINSLOT", &slot_s, &batch.to_string()],
            )?;
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let to_s = to.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &to_s, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().copied());
            let out = self.cli_on(from, &args)?;
            ensure!(out.trim() == "OK", "MIGRATE answered {out}");
            moved += keys.len();
            std::thread::sleep(pause);
        }
        // The destination first, then the source, then the other masters (Redis' order).
        let mut order = vec![to, from];
        order.extend(
            self.master_ports()?
                .into_iter()
                .filter(|p| *p != to && *p != from),
        );
        for port in order {
            self.cli_on(port, &["CLUSTER", "SETSLOT", &slot_s, "NODE", &to_id])?;
        }
        Ok(moved)
    }
}

impl RedisCluster {
    /// Ports of the live replicas of the master on `port` (by `CLUSTER NODES`).
    pub fn replica_ports_of(&self, port: u16) -> anyhow::Result<Vec<u16>> {
        let id = self.node_id(port)?;
        let nodes = self.cli_on(port, &["CLUSTER", "NODES"])?;
        let mut out = Vec::new();
        for line in nodes.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 3 && f[2].contains("slave") && f[3] == id {
                let p = f[1].split(['@', ':']).nth(1).context("node address")?;
                out.push(p.parse()?);
            }
        }
        Ok(out)
    }

    /// The shard of the master on `port` loses its data: its replicas are killed (nobody can
    /// take over), then the master is killed and started again on the same port and
    /// directory without its data files but with its `nodes.conf`, so it rejoins as the
    /// same node, owning the same slots, empty. Waits until the cluster is ok again.
    pub fn lose_shard(&mut self, port: u16) -> anyhow::Result<()> {
        let replicas = self.replica_ports_of(port)?;
        for n in self.nodes.iter_mut() {
            if replicas.contains(&n.port()) {
                n.kill();
            }
        }
        let master = self
            .nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .context("no node on that port")?;
        master.kill();
        for data in ["dump.rdb", "appendonlydir", "appendonly.aof"] {
            let path = master.dir().join(data);
            if path.is_dir() {
                std::fs::remove_dir_all(&path)?;
            } else if path.exists() {
                std::fs::remove_file(&path)?;
            }
        }
        master.start_again()?;
        self.wait_ok(Duration::from_secs(30))
    }
}
