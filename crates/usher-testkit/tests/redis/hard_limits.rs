//! What one address, or one greedy request, may take from a server (issue 23, findings 5, 6,
//! 7): sockets per address at accept, sockets that never finish their head shed before
//! streams, no body on a route that takes none, the admin token checked before a body is
//! read, the open-files soft limit raised at start, and answers of any size sent whole.
//! Clients are other loopback addresses (`127.0.0.x`), each a client address of its own.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::sync::PoisonError;
use std::time::Duration;

use anyhow::Context as _;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use usher_core::ids::QueueId;
use usher_core::keys::QueueKeys;
use usher_testkit::config::admin_token_spec;
use usher_testkit::line::{PAUSED, T};
use usher_testkit::procs::{binary, free_addr, Proc};
use usher_testkit::raw;
use usher_testkit::sse::SseItem;
use usher_testkit::stack::{self, Stack, StackOptions};
use usher_testkit::wait::{eventually, within};
use usher_testkit::{RedisServer, SseClient};

fn loopback(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// Opens a socket from `from` and sends part of a request head, never its end.
async fn slow_head(from: u8, addr: SocketAddr) -> anyhow::Result<TcpStream> {
    let mut s = raw::connect_from(Some(loopback(from)), addr).await?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n").await?;
    Ok(s)
}

/// A `GET /healthz` from `from`: its status, or the error when the socket was refused.
async fn health_from(from: u8, addr: SocketAddr) -> anyhow::Result<u16> {
    let mut s = raw::send(
        Some(loopback(from)),
        addr,
        b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await?;
    Ok(raw::read_response(&mut s, None, T).await?.status)
}

/// One address holds at most `USHER_IP_MAX_SOCKETS` sockets: past it a new one is closed at
/// once, while another address still connects and is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_past_its_socket_cap_is_refused_while_another_connects() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let gw = Proc::start(
        "usher-gateway",
        &[
            ("USHER_REDIS_URL", redis.url()),
            ("USHER_IP_MAX_SOCKETS", "4".into()),
            // Long enough that no socket below is closed by its head timeout.
            ("USHER_HEADER_TIMEOUT_SECS", "300".into()),
        ],
    )
    .await?;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(slow_head(2, gw.addr).await?);
    }
    // The gateway counts a socket once it accepted it: wait until the fifth is refused.
    eventually(
        "a fifth socket from 127.0.0.2 is closed at once",
        async || {
            let Ok(mut s) = raw::connect_from(Some(loopback(2)), gw.addr).await else {
                return false;
            };
            let _ = s
                .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
                .await;
            raw::closed_within(&mut s, Duration::from_secs(1)).await
        },
    )
    .await?;
    // Another address is served meanwhile.
    assert_eq!(health_from(3, gw.addr).await?, 200);
    // The first address gets its sockets back as its old ones close.
    drop(held);
    eventually("127.0.0.2 is served again", async || {
        health_from(2, gw.addr).await.is_ok_and(|s| s == 200)
    })
    .await?;
    Ok(())
}

/// When sockets run short, sockets that never finished their request head give way before
/// streams: a browser that connects then gets a place, and the streams already open stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_with_an_unfinished_head_are_shed_before_streams() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions {
        gateways: 0,
        ..Default::default()
    })
    .await?;
    let mut cfg = usher_testkit::config::gateway(&stack.redis.url());
    cfg.max_sockets = 12;
    cfg.health_reserve_sockets = 2;
    cfg.header_timeout_secs = 300;
    let mut stack = stack;
    stack.gateways.push(stack::gateway_with(cfg).await?);
    stack.create_queue("q", PAUSED).await?;
    let addr = stack.gateways[0].addr;
    let browser = SseClient::from_address(stack.gateway_url(0), loopback(2), Default::default())?;
    let mut streams = Vec::new();
    for _ in 0..3 {
        let mut c = browser.open("/api/queues/q/stream", None).await?;
        first_waiting(&mut c).await?;
        streams.push(c);
    }
    // Slow heads from another address fill every other socket (and more are refused).
    let mut slow = Vec::new();
    for _ in 0..12 {
        if let Ok(s) = slow_head(3, addr).await {
            slow.push(s);
        }
    }
    // A new browser is let in: the slow heads give way (its first tries may be refused,
    // as `EventSource` would retry).
    let late = SseClient::from_address(stack.gateway_url(0), loopback(4), Default::default())?;
    // Where the last try got to: a wait that runs out says which step it was stuck in (a try
    // still running at the deadline is cut off, and leaves only this behind).
    let step = std::sync::Mutex::new("none yet");
    let at = |s: &'static str| *step.lock().unwrap_or_else(PoisonError::into_inner) = s;
    eventually(
        "a new browser gets a place past the slow heads",
        async || {
            at("sending the request and awaiting the response head");
            let Ok(mut c) = late.open("/api/queues/q/stream", None).await else {
                at("refused (the connection closed or reset)");
                return false;
            };
            if c.status != 200 {
                at("answered with a status other than 200");
                return false;
            }
            at("awaiting the first `waiting` event");
            let seen = first_waiting(&mut c).await.is_ok();
            if !seen {
                at("given a stream that ended before a `waiting` event");
            }
            seen
        },
    )
    .await
    .with_context(|| {
        let last = *step.lock().unwrap_or_else(PoisonError::into_inner);
        format!("the last try was {last}")
    })?;
    // The streams already open were not shed.
    assert_eq!(stack.waiting("q").await?, 4);
    for c in &mut streams {
        assert!(
            !matches!(c.next_item(Duration::from_millis(200)).await, Ok(None)),
            "an open stream was closed"
        );
    }
    Ok(())
}

async fn first_waiting(c: &mut usher_testkit::sse::SseConn) -> anyhow::Result<()> {
    loop {
        match c.next_item(T).await? {
            Some(SseItem::Event(e)) if e.event == "waiting" => return Ok(()),
            Some(SseItem::Event(e)) => anyhow::bail!("unexpected {} event", e.event),
            Some(_) => {}
            None => anyhow::bail!("the stream ended before a waiting event"),
        }
    }
}

/// The gateway's routes take no request body: one is refused at its head with a JSON error,
/// without reading it, and the connection closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_on_a_route_that_takes_none_is_refused() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions {
        gateways: 1,
        ..Default::default()
    })
    .await?;
    let addr = stack.gateways[0].addr;
    // Only the head: the answer must not wait for the 60,000 bytes announced.
    let mut s = raw::send(
        None,
        addr,
        b"POST /healthz HTTP/1.1\r\nhost: x\r\ncontent-length: 60000\r\n\r\n",
    )
    .await?;
    let r = raw::read_response(&mut s, None, T).await?;
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(
        r.json()?["error"]
            .as_str()
            .is_some_and(|e| e.contains("body")),
        "{}",
        r.text()
    );
    assert!(raw::closed_within(&mut s, T).await);
    // Without a body the same connection keeps serving.
    let mut s = raw::send(
        None,
        addr,
        b"GET /healthz HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n",
    )
    .await?;
    assert_eq!(raw::read_response(&mut s, None, T).await?.status, 200);
    Ok(())
}

/// The dispatcher checks the admin token before it reads a body: a request with a wrong token
/// that announces a large body is answered `401` at once, its body never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatcher_answers_a_bad_admin_token_before_reading_the_body() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let mut cfg = usher_testkit::config::dispatcher(&redis.url(), 100);
    // Were the body awaited, the answer would come after this (a 408).
    cfg.serve.body_timeout_secs = 300;
    let d = stack::dispatcher_with(cfg).await?;
    let mut s = raw::send(
        None,
        d.addr,
        b"PUT /admin/queues/q HTTP/1.1\r\nhost: x\r\nauthorization: Bearer wrong\r\n\
          content-type: application/json\r\ncontent-length: 1000000\r\n\r\n{",
    )
    .await?;
    let r = raw::read_response(&mut s, None, T).await?;
    assert_eq!(r.status, 401, "{}", r.text());
    Ok(())
}

/// `Max open files` from `/proc/<pid>/limits`: (soft, hard).
fn open_files(pid: u32) -> anyhow::Result<(String, String)> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits"))?;
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .ok_or_else(|| anyhow::anyhow!("no open-files line in /proc/{pid}/limits"))?;
    let mut f = line["Max open files".len()..].split_whitespace();
    Ok((
        f.next().unwrap_or_default().to_owned(),
        f.next().unwrap_or_default().to_owned(),
    ))
}

/// Kills the child it holds when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Each server started with a low soft limit on open files (a container's 1,024; here 512)
/// raises it to the hard limit at start and logs both.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_raise_their_open_files_soft_limit_to_the_hard_limit() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let (_, hard) = open_files(std::process::id())?;
    anyhow::ensure!(
        hard == "unlimited" || hard.parse::<u64>().is_ok_and(|h| h > 512),
        "the hard limit ({hard}) leaves nothing to raise"
    );
    let dispatcher_addr = free_addr()?;
    for (name, addr) in [
        ("usher-dispatcher", dispatcher_addr),
        ("usher-gateway", free_addr()?),
        ("usher-booking-demo", free_addr()?),
    ] {
        let dir = tempfile::tempdir()?;
        let log = dir.path().join("log");
        let out = std::fs::File::create(&log)?;
        // `prlimit` lowers the soft limit only, then runs the server in its place.
        let child = Command::new("prlimit")
            .arg("--nofile=512:")
            .arg(binary(name)?)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("RUST_LOG", "info")
            .env("USHER_LISTEN", addr.to_string())
            .env("USHER_REDIS_URL", redis.url())
            .env("USHER_ADMIN_TOKEN", admin_token_spec())
            .env("USHER_DISPATCHER_URL", format!("http://{dispatcher_addr}"))
            .stdout(Stdio::from(out.try_clone()?))
            .stderr(Stdio::from(out))
            .spawn()?;
        let child = Killed(child);
        let pid = child.0.id();
        let logged = eventually(&format!("{name} logs its open-files limits"), async || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.lines()
                .find(|l| l.contains("open files"))
                .map(str::to_owned)
        })
        .await?;
        let (soft, hard_now) = open_files(pid)?;
        assert_eq!(
            (soft.as_str(), hard_now.as_str()),
            (hard.as_str(), hard.as_str()),
            "{name}"
        );
        assert!(
            logged.contains("512") && logged.contains(&hard),
            "{name} logs both limits: {logged}"
        );
        drop(child);
    }
    Ok(())
}

/// A public draw record far over 1 MiB (100,000 entrants, 6.6 MB of JSON) arrives whole: it
/// was an empty `200`. The record is written into Redis as the draw leaves it (making
/// 100,000 entrants would take minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draw_record_of_100000_entrants_arrives_whole() -> anyhow::Result<()> {
    const ENTRANTS: usize = 100_000;
    let stack = Stack::start(StackOptions {
        gateways: 1,
        ..Default::default()
    })
    .await?;
    stack.create_queue("big", PAUSED).await?;
    let keys = QueueKeys::new(&QueueId::new("big")?);
    let seed = "ab".repeat(32);
    let commitment = hex(&Sha256::digest(hex_bytes(&seed)));
    let mut record = Vec::with_capacity(ENTRANTS * 32);
    for i in 0..ENTRANTS {
        record.extend_from_slice(&Sha256::digest(i.to_le_bytes()));
    }
    let mut c = redis::Client::open(stack.redis.url())?
        .get_multiplexed_async_connection()
        .await?;
    redis::cmd("HSET")
        .arg(&keys.meta)
        .arg("opens_at_ms")
        .arg(1_700_000_000_000u64)
        .arg("draw")
        .arg("done")
        .arg("draw_seed")
        .arg(&seed)
        .arg("draw_commitment")
        .arg(&commitment)
        .query_async::<()>(&mut c)
        .await?;
    redis::cmd("SET")
        .arg(&keys.draw)
        .arg(&record)
        .query_async::<()>(&mut c)
        .await?;
    let r = within(
        "the draw record",
        Duration::from_secs(60),
        reqwest::get(format!("{}/api/queues/big/draw", stack.gateway_url(0))),
    )
    .await??;
    assert_eq!(r.status(), 200);
    let body = r.bytes().await?;
    assert!(body.len() > 6_000_000, "{} bytes", body.len());
    let v: serde_json::Value = serde_json::from_slice(&body)?;
    let entrants = v["entrants"].as_array().map_or(0, Vec::len);
    assert_eq!(entrants, ENTRANTS);
    assert_eq!(v["entrants"][7], hex(&record[7 * 32..8 * 32]));
    assert_eq!(v["commitment"], commitment.as_str());
    Ok(())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn hex_bytes(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .filter_map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

/// Resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .ok_or_else(|| anyhow::anyhow!("no VmRSS in /proc/{pid}/status"))?;
    Ok(kib * 1024)
}

/// Opens `n` keep-alive connections that each send `request` and read its answer, then stay
/// open and idle; the gateway's resident memory they added, per connection.
async fn idle_cost(
    gw: &Proc,
    n: usize,
    request: &[u8],
    held: &mut Vec<TcpStream>,
) -> anyhow::Result<f64> {
    let before = rss(gw.pid())?;
    for _ in 0..n {
        let mut s = raw::send(None, gw.addr, request).await?;
        let r = raw::read_response(&mut s, None, T).await?;
        anyhow::ensure!(r.status == 200, "answered {}", r.status);
        held.push(s);
    }
    let after = rss(gw.pid())?;
    Ok(after.saturating_sub(before) as f64 / n as f64)
}

/// An idle keep-alive connection holds no request buffer: one whose last request had a 14 KB
/// head costs the gateway no more memory than one whose head was a few bytes (it kept the
/// head's buffer, up to 16 KiB, and a body's, up to 64 KiB, for as long as it stayed open).
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_holds_no_request_buffer() -> anyhow::Result<()> {
    const N: usize = 1000;
    let redis = RedisServer::start()?;
    let gw = Proc::start(
        "usher-gateway",
        &[
            ("USHER_REDIS_URL", redis.url()),
            ("USHER_IDLE_TIMEOUT_SECS", "300".into()),
            ("USHER_WORKER_THREADS", "1".into()),
        ],
    )
    .await?;
    let small = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n".to_vec();
    let mut big = b"GET /healthz HTTP/1.1\r\nhost: x\r\n".to_vec();
    for _ in 0..42 {
        big.extend_from_slice(b"x-pad: ");
        big.extend(std::iter::repeat_n(b'a', 320));
        big.extend_from_slice(b"\r\n");
    }
    big.extend_from_slice(b"\r\n");
    let mut held = Vec::new();
    // Warm up: the allocator's and the runtime's own first growth is not a connection's.
    idle_cost(&gw, N, &small, &mut held).await?;
    held.clear();
    let floor = idle_cost(&gw, N, &small, &mut held).await?;
    let with_big_heads = idle_cost(&gw, N, &big, &mut held).await?;
    assert!(
        with_big_heads <= floor + 4096.0,
        "an idle connection after a {}-byte head holds {with_big_heads:.0} bytes, \
         one after a {}-byte head {floor:.0}",
        big.len(),
        small.len()
    );
    Ok(())
}
