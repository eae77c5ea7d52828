//! `usher-joins-floor`, the machine's floor for joins: run as a real process, with the real
//! load generator putting a few hundred joins through it. Every join must get its `waiting`
//! event and stay connected, as on a gateway whose queue is paused. With `--redis` (the
//! round-trip floor) every stream waits for its own `PING` to a real redis-server first; with
//! `--join` (the join floor) for usher's own join, which takes it a place in the queue; with
//! `--burn-us` (the CPU floor) the stand-in spends that much CPU on each.

mod support;

use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{ensure, Context};
use serde_json::Value;
use support::run_bounded;
use usher_core::ids::QueueId;
use usher_core::store::{QueueConfig, Store};
use usher_core::time::now_ms;
use usher_testkit::procs::free_addr;
use usher_testkit::redis_server::redis_cli;
use usher_testkit::RedisServer;

const JOINS: u64 = 400;

/// The floor server, stopped (by its PID) when dropped.
struct Floor {
    child: Child,
    url: String,
}

impl Floor {
    /// Starts one with `extra` arguments.
    fn start(extra: &[&str]) -> anyhow::Result<Self> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_usher-joins-floor"))
            .args(["--listen", "127.0.0.1:0", "--retry-ms", "500"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start usher-joins-floor")?;
        let mut line = String::new();
        let read = child
            .stdout
            .take()
            .context("its stdout")
            .and_then(|out| Ok(BufReader::new(out).read_line(&mut line)?));
        let floor = Self {
            child,
            url: line.trim().trim_start_matches("listening on ").to_owned(),
        };
        read?;
        ensure!(
            floor.url.starts_with("http://127.0.0.1:"),
            "usher-joins-floor said {line:?}"
        );
        Ok(floor)
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The queue the joins go to.
const QUEUE: &str = "floor";

/// Puts `JOINS` joins through `floor` with the load generator; checks that every one got its
/// `waiting` event and is held open.
fn put_joins_through(floor: &Floor) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let report = dir.path().join("r.json");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_usher-loadgen"));
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .args(["--gateways", &floor.url])
        .args(["--queue", QUEUE])
        .args(["--connections", &JOINS.to_string()])
        .args(["--join-rate", "800"])
        .args(["--workers", "2"])
        .args(["--source-ips", "127.0.0.2,127.0.0.3"])
        .args(["--duration", "3"])
        .arg("--report")
        .arg(&report)
        .arg("--quiet");
    let out = run_bounded(cmd, Duration::from_secs(120))?;
    ensure!(
        out.status.success(),
        "usher-loadgen failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&report)?)?;
    let t = &r["totals"];
    assert_eq!(t["joined"], JOINS, "{t}");
    assert_eq!(t["waiting_events"], JOINS, "one event per stream: {t}");
    assert_eq!(t["still_connected"], JOINS, "streams are held open: {t}");
    assert_eq!(t["errors"], 0, "{t}");
    assert_eq!(t["reconnects"], 0, "{t}");
    assert_eq!(t["empty_streams"], 0, "{t}");
    assert_eq!(r["latency_ms"]["join"]["count"], JOINS);
    Ok(())
}

#[test]
fn every_join_gets_its_waiting_event_from_the_floor() -> anyhow::Result<()> {
    let floor = Floor::start(&[])?;
    put_joins_through(&floor)?;
    drop(floor);
    Ok(())
}

#[test]
fn the_round_trip_floor_answers_each_join_after_its_own_ping() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let floor = Floor::start(&["--redis", &redis.url()])?;
    let before = calls(&redis, "ping")?;
    put_joins_through(&floor)?;
    // One round trip per stream, none shared: the round trip is what this floor measures.
    assert_eq!(calls(&redis, "ping")? - before, JOINS);
    drop((floor, redis));
    Ok(())
}

#[test]
fn the_cpu_floor_spends_its_burn_on_every_join() -> anyhow::Result<()> {
    const BURN_US: u64 = 500;
    let floor = Floor::start(&["--burn-us", &BURN_US.to_string()])?;
    let stat = format!("/proc/{}/stat", floor.child.id());
    let cpu = || -> anyhow::Result<f64> {
        let text = std::fs::read_to_string(&stat)?;
        usher_loadgen::cpu::stat_cpu_s(&text).context("utime and stime")
    };
    let before = cpu()?;
    put_joins_through(&floor)?;
    // Every join answered, each after 0.5 ms of the stand-in's CPU: 0.2 s at least (the clock
    // ticks of `/proc` are 10 ms).
    let spent = cpu()? - before;
    let asked = (JOINS * BURN_US) as f64 / 1e6;
    assert!(
        spent >= asked - 0.01,
        "{spent} s of CPU for {asked} s burnt"
    );
    drop(floor);
    Ok(())
}

/// Redis's count of calls of `command` (`INFO commandstats`).
fn calls(redis: &RedisServer, command: &str) -> anyhow::Result<u64> {
    let stats = redis_cli(redis.port(), &["INFO", "commandstats"])?;
    let prefix = format!("cmdstat_{command}:calls=");
    Ok(stats
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .map_or(Ok(0), str::parse)?)
}

#[test]
fn the_join_floor_takes_one_place_in_the_queue_for_each_join() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let rt = tokio::runtime::Runtime::new()?;
    let q = QueueId::new(QUEUE)?;
    let store = rt.block_on(Store::connect(&redis.url()))?;
    // Paused, as `make bench` creates it: every place stays waiting.
    let paused = QueueConfig {
        paused: true,
        ..QueueConfig::default()
    };
    rt.block_on(store.put_queue(&q, &paused))?;
    let floor = Floor::start(&["--join", &redis.url()])?;
    let calls_before = calls(&redis, "evalsha")? + calls(&redis, "eval")?;
    put_joins_through(&floor)?;
    // Each stream answered took its own place, and only those did.
    let stats = rt.block_on(store.queue_stats(&q, now_ms()))?;
    assert_eq!(stats.waiting, JOINS, "{stats:?}");
    // One place a call, none batched: at least one join call per stream (a few more, as the
    // first ones in flight meet a Redis that does not know the script yet, and are made
    // again once it is loaded).
    let join_calls = calls(&redis, "evalsha")? + calls(&redis, "eval")? - calls_before;
    assert!(
        join_calls >= JOINS,
        "{join_calls} join calls for {JOINS} joins"
    );

    // A queue that does not exist takes no place: the stream is closed unanswered.
    let mut sock = std::net::TcpStream::connect(floor.url.trim_start_matches("http://"))?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))?;
    sock.write_all(b"GET /api/queues/nowhere/stream HTTP/1.1\r\nhost: x\r\n\r\n")?;
    let mut answer = Vec::new();
    sock.read_to_end(&mut answer)?;
    assert!(answer.is_empty(), "{:?}", String::from_utf8_lossy(&answer));
    drop((floor, redis));
    Ok(())
}

#[test]
fn the_join_floor_will_not_start_without_its_redis() -> anyhow::Result<()> {
    refuses_to_start_without_redis("--join")
}

/// The floor given `flag` (`--redis`, `--join`) and a Redis that is not there must refuse to
/// start, saying so.
fn refuses_to_start_without_redis(flag: &str) -> anyhow::Result<()> {
    let redis = format!("redis://127.0.0.1:{}", free_addr()?.port());
    refuses_to_start(
        &["--listen", "127.0.0.1:0", flag, &redis],
        "cannot reach Redis",
    )
}

#[test]
fn a_floor_is_either_the_round_trip_floor_or_the_join_floor() -> anyhow::Result<()> {
    let redis = format!("redis://127.0.0.1:{}", free_addr()?.port());
    refuses_to_start(
        &[
            "--listen",
            "127.0.0.1:0",
            "--redis",
            &redis,
            "--join",
            &redis,
        ],
        "cannot be used with",
    )
}

#[test]
fn the_round_trip_floor_will_not_start_without_its_redis() -> anyhow::Result<()> {
    refuses_to_start_without_redis("--redis")
}

#[test]
fn the_floor_refuses_to_listen_beyond_loopback() -> anyhow::Result<()> {
    refuses_to_start(&["--listen", "0.0.0.0:0"], "loopback")
}

/// Runs the floor with `args`: it must exit at once with an error that says `why`.
fn refuses_to_start(args: &[&str], why: &str) -> anyhow::Result<()> {
    let out = Command::new(env!("CARGO_BIN_EXE_usher-joins-floor"))
        .args(args)
        .output()
        .context("cannot run usher-joins-floor")?;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(why), "{err}");
    Ok(())
}
