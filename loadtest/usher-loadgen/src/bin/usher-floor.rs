//! `usher-floor`: this machine's floor for pushing one small event to many loopback TCP
//! connections at once, with no application logic. See `usher-floor --help`.

use std::cell::RefCell;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use clap::Parser;
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::{mpsc as tmpsc, oneshot};
use tokio::task::JoinSet;
use usher_loadgen::conn::{connect, now_us};
use usher_loadgen::http::{BodyDecoder, Framing};
use usher_loadgen::limits;
use usher_loadgen::plan::parse_source_ips;
use usher_loadgen::stats::{round_to, Hist};
use usher_sse::Item;

/// The same allocator as the gateway and the load generator.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ABOUT: &str = "Measures this machine's floor for pushing one small event to many loopback \
                     TCP connections at once, with no application logic";

const LONG_ABOUT: &str = "\
Measures this machine's floor for pushing one small event to many loopback TCP
connections at once, with no application logic: what a gateway admitting N
browsers in one tick cannot beat on this machine, whatever its code does.

It opens --connections TCP connection pairs over loopback (clients bound to
--source-ips round-robin, TCP_NODELAY on both ends), then runs --bursts bursts,
one every --interval-ms. In each burst every sending thread takes a timestamp t0
and writes one event to each of its connections in a loop: an SSE `admitted`
frame of --event-bytes bytes in HTTP chunked framing, like the gateway's, one
write per connection, t0 carried in the event id. Each receiving connection is
a task that reads and decodes the chunks and the SSE event with the load
generator's own decoder and parser, and records now - t0. A burst ends when every connection has its
event; the next one starts at its scheduled time.

Threads: --senders threads write and --receivers threads read, each with its own
single-threaded tokio runtime (a gateway with one worker thread; a
load-generator worker). The connections are split evenly between them.

How to read it: the latency percentiles are the floor for a burst of that many
events on this machine. Of an end-to-end benchmark's admission latency, the part
at or below the floor's is the kernel's TCP send and receive on these CPUs; the
part above it is the application's (dispatcher, gateway, load generator).
`last_write_ms` is how long the sending side took to issue its writes; on
loopback a write also runs the receiving socket's TCP input in the writer's
thread (the softirq runs there), so the sender's CPU per event is most of the
kernel's cost of one event and the receiver's is its wake-up and reads. Bursts
differ from one another (by a third or more on a small VM): read them all, not
just the overall figures. Run it on an otherwise idle machine: `machine.busy_cpu_us_per_event` (all CPUs, the whole
burst phase including the gaps) well above sender + receiver means something
else was running.

Each pair holds two descriptors in this one process: at most
(open-files limit - 500) / 2 pairs.

Output: one JSON object on stdout; a short summary on stderr. Exit status: 0 on
success; 1 on a usage or runtime error; 2 when some event had not arrived 5 s
after its burst started.";

#[derive(Debug, Parser)]
#[command(name = "usher-floor", version, about = ABOUT, long_about = LONG_ABOUT)]
struct Args {
    /// Connection pairs: how many events each burst pushes, one per connection.
    #[arg(long, env = "USHER_FLOOR_CONNECTIONS", default_value_t = 5000)]
    connections: usize,

    /// Bursts to run, one every --interval-ms.
    #[arg(long, env = "USHER_FLOOR_BURSTS", default_value_t = 6)]
    bursts: u32,

    /// Milliseconds from one burst's start to the next (the first starts one interval after
    /// the connections are set up). A burst that takes longer delays the next one.
    #[arg(long, env = "USHER_FLOOR_INTERVAL_MS", default_value_t = 1000)]
    interval_ms: u64,

    /// Size of each event's SSE frame in bytes (`event: admitted`, `id:`, `data:` padded to
    /// this size); the chunked framing around it adds a few bytes to each write.
    #[arg(long, env = "USHER_FLOOR_EVENT_BYTES", default_value_t = 600)]
    event_bytes: usize,

    /// Source addresses for the client sockets: a range (`127.0.0.2-127.0.0.61`), a comma
    /// list, or both. Each client binds to the next one, so every address brings its own
    /// ephemeral ports. Loopback only.
    #[arg(
        long,
        env = "USHER_FLOOR_SOURCE_IPS",
        default_value = "127.0.0.2-127.0.0.61"
    )]
    source_ips: String,

    /// Sending threads, each with its own single-threaded runtime and an even share of the
    /// connections' server ends.
    #[arg(long, env = "USHER_FLOOR_SENDERS", default_value_t = 1)]
    senders: usize,

    /// Receiving threads, each with its own single-threaded runtime and an even share of the
    /// connections' client ends (one task per connection).
    #[arg(long, env = "USHER_FLOOR_RECEIVERS", default_value_t = 1)]
    receivers: usize,
}

/// How long every event of a burst has to arrive, from the burst's start.
const BURST_DEADLINE: Duration = Duration::from_secs(5);
/// How long opening all the connections may take.
const SETUP_DEADLINE: Duration = Duration::from_secs(60);
/// Connections being opened at once.
const CONNECT_CONCURRENCY: usize = 256;
const MAX_THREADS: usize = 64;
const MAX_BURSTS: u32 = 1000;
const MAX_INTERVAL_MS: u64 = 60_000;
const MAX_EVENT_BYTES: usize = 65_536;
/// Bytes read at a time by a receiving connection.
const READ_BUF: usize = 2048;
/// `/proc/stat` counts in USER_HZ ticks, 100 per second on Linux.
const USER_HZ: u64 = 100;

/// Some event had not arrived by the deadline (exit status 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Missing(String);

fn main() {
    let args = Args::parse();
    usher_http::disable_transparent_huge_pages();
    let code = match run(&args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("usher-floor: error: {e:#}");
            if e.downcast_ref::<Missing>().is_some() {
                2
            } else {
                1
            }
        }
    };
    std::process::exit(code);
}

fn run(a: &Args) -> anyhow::Result<()> {
    let n = a.connections;
    ensure!(n >= 1, "--connections must be at least 1");
    ensure!(
        (1..=MAX_BURSTS).contains(&a.bursts),
        "--bursts must be between 1 and {MAX_BURSTS}"
    );
    ensure!(
        (10..=MAX_INTERVAL_MS).contains(&a.interval_ms),
        "--interval-ms must be between 10 and {MAX_INTERVAL_MS}"
    );
    for (flag, v) in [("--senders", a.senders), ("--receivers", a.receivers)] {
        ensure!(
            (1..=MAX_THREADS).contains(&v) && v <= n,
            "{flag} must be between 1 and {MAX_THREADS}, and at most --connections"
        );
    }
    let widest = frame(a.bursts - 1, u64::MAX, 0).len();
    ensure!(
        (widest..=MAX_EVENT_BYTES).contains(&a.event_bytes),
        "--event-bytes must be between {widest} and {MAX_EVENT_BYTES}"
    );
    let ips = parse_source_ips(&a.source_ips)?;

    let limit = limits::raise_nofile();
    let most = limit.saturating_sub(limits::HEADROOM) / 2;
    ensure!(
        n as u64 <= most,
        "--connections {n} needs {} open files in this process (two per pair, plus {} \
         headroom), but its open-files limit is {limit}: at most {most} pairs",
        2 * n as u64 + limits::HEADROOM,
        limits::HEADROOM
    );
    // Grow the descriptor table now, while this process has one thread.
    limits::reserve_descriptors(2 * n as u64 + 64);

    let setup_start = Instant::now();
    let setup = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the setup runtime")?;
    let (servers, clients) = setup
        .block_on(async {
            tokio::time::timeout(SETUP_DEADLINE, connect_all(n, &ips))
                .await
                .map_err(|_| {
                    anyhow::anyhow!(
                        "opening {n} connections took more than {} s",
                        SETUP_DEADLINE.as_secs()
                    )
                })?
        })
        .context("setting up the connections")?;
    drop(setup);
    let setup_ms = setup_start.elapsed().as_secs_f64() * 1000.0;

    let mut crew = Crew::start(a, servers, clients)?;
    let measured = measure(a, &crew);
    let hists = crew.finish();
    let m = measured?;
    let hists = hists?;
    report(a, setup_ms, ips.len(), &m, &hists);
    Ok(())
}

/// Opens `n` loopback connections (clients bound to `ips` round-robin), accepting them at
/// the same time; returns the server ends and the client ends, detached from this runtime.
async fn connect_all(
    n: usize,
    ips: &[IpAddr],
) -> anyhow::Result<(Vec<std::net::TcpStream>, Vec<std::net::TcpStream>)> {
    let v6 = ips.first().is_some_and(IpAddr::is_ipv6);
    let bind = if v6 {
        SocketAddr::from((Ipv6Addr::LOCALHOST, 0))
    } else {
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
    };
    // Sets TCP_NODELAY on the listener; accepted sockets inherit it, as in the gateway.
    let listener = usher_http::listen(bind).with_context(|| format!("cannot listen on {bind}"))?;
    let target = listener.local_addr()?;
    let accept = async {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let (s, _) = listener.accept().await.context("accept")?;
            s.set_nodelay(true)?;
            out.push(s.into_std()?);
        }
        anyhow::Ok(out)
    };
    let connect = async {
        let mut set = JoinSet::new();
        let mut out = Vec::with_capacity(n);
        for ip in ips.iter().copied().cycle().take(n) {
            if set.len() >= CONNECT_CONCURRENCY {
                if let Some(r) = set.join_next().await {
                    out.push(r??);
                }
            }
            set.spawn(connect_one(target, ip));
        }
        while let Some(r) = set.join_next().await {
            out.push(r??);
        }
        anyhow::Ok(out)
    };
    tokio::try_join!(accept, connect)
}

async fn connect_one(target: SocketAddr, ip: IpAddr) -> anyhow::Result<std::net::TcpStream> {
    let s = connect(target, Some(ip)).await.map_err(|e| {
        anyhow::anyhow!("cannot connect from {ip} to {target}: {} failed", e.kind())
    })?;
    Ok(s.into_std()?)
}

/// The SSE frame of burst `burst` started at `t0_us` (both in its id, `<burst>.<t0_us>`),
/// padded to `size` bytes (not padded when it is already that long).
fn frame(burst: u32, t0_us: u64, size: usize) -> Vec<u8> {
    let head = format!("event: admitted\nid: {burst}.{t0_us}\ndata: {{\"pad\":\"");
    let tail = "\"}\n\n";
    let pad = size.saturating_sub(head.len() + tail.len());
    let mut out = Vec::with_capacity(head.len() + pad + tail.len());
    out.extend_from_slice(head.as_bytes());
    out.resize(out.len() + pad, b'x');
    out.extend_from_slice(tail.as_bytes());
    out
}

/// `frame` in HTTP chunked framing: `<hex len>\r\n<frame>\r\n`.
fn chunk(burst: u32, t0_us: u64, size: usize) -> Vec<u8> {
    let f = frame(burst, t0_us, size);
    let mut out = format!("{:x}\r\n", f.len()).into_bytes();
    out.extend_from_slice(&f);
    out.extend_from_slice(b"\r\n");
    out
}

/// `(burst, t0_us)` from an event id `<burst>.<t0_us>`.
fn stamp(id: &str) -> Option<(u32, u64)> {
    let (burst, t0) = id.split_once('.')?;
    Some((burst.parse().ok()?, t0.parse().ok()?))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Sender,
    Receiver,
}

/// What the threads tell the main thread.
enum Msg {
    Ready {
        role: Role,
        thread: usize,
        tid: i32,
    },
    Sent {
        burst: u32,
        last_write_us: u64,
        blocked: u64,
    },
    Received {
        burst: u32,
    },
    Failed(String),
}

enum Cmd {
    Burst(u32),
}

/// The sending and receiving threads.
struct Crew {
    msgs: mpsc::Receiver<Msg>,
    cmds: Vec<tmpsc::UnboundedSender<Cmd>>,
    stops: Vec<oneshot::Sender<()>>,
    sending: Vec<JoinHandle<()>>,
    receiving: Vec<JoinHandle<Vec<Hist>>>,
    sender_tids: Vec<i32>,
    receiver_tids: Vec<i32>,
    arrived: Arc<Vec<AtomicU64>>,
}

impl Crew {
    fn start(
        a: &Args,
        servers: Vec<std::net::TcpStream>,
        clients: Vec<std::net::TcpStream>,
    ) -> anyhow::Result<Self> {
        let (tx, msgs) = mpsc::channel();
        let arrived: Arc<Vec<AtomicU64>> =
            Arc::new((0..a.bursts).map(|_| AtomicU64::new(0)).collect());
        let mut crew = Self {
            msgs,
            cmds: Vec::new(),
            stops: Vec::new(),
            sending: Vec::new(),
            receiving: Vec::new(),
            sender_tids: vec![0; a.senders],
            receiver_tids: vec![0; a.receivers],
            arrived: arrived.clone(),
        };
        let started = crew.spawn(a, servers, clients, &tx, arrived);
        drop(tx);
        if let Err(e) = started.and_then(|()| crew.wait_ready()) {
            // Stop whatever did start; the first error is the one to report.
            let _ = crew.finish();
            return Err(e);
        }
        Ok(crew)
    }

    fn spawn(
        &mut self,
        a: &Args,
        servers: Vec<std::net::TcpStream>,
        clients: Vec<std::net::TcpStream>,
        tx: &mpsc::Sender<Msg>,
        arrived: Arc<Vec<AtomicU64>>,
    ) -> anyhow::Result<()> {
        for (i, socks) in split(servers, a.senders).into_iter().enumerate() {
            let (cmd_tx, cmd_rx) = tmpsc::unbounded_channel();
            let out = tx.clone();
            let size = a.event_bytes;
            let h = std::thread::Builder::new()
                .name(format!("floor-send-{i}"))
                .spawn(move || {
                    if let Err(e) = sender(i, socks, cmd_rx, &out, size) {
                        let _ = out.send(Msg::Failed(format!("sender {i}: {e:#}")));
                    }
                })
                .context("cannot start a sender thread")?;
            self.cmds.push(cmd_tx);
            self.sending.push(h);
        }
        for (i, socks) in split(clients, a.receivers).into_iter().enumerate() {
            let (stop_tx, stop_rx) = oneshot::channel();
            let out = tx.clone();
            let arrived = arrived.clone();
            let bursts = a.bursts as usize;
            let h = std::thread::Builder::new()
                .name(format!("floor-recv-{i}"))
                .spawn(move || {
                    let st = RecvState {
                        thread: i,
                        share: socks.len() as u64,
                        hists: (0..bursts).map(|_| Hist::new()).collect(),
                        counts: vec![0; bursts],
                        arrived,
                        out: out.clone(),
                        failed: false,
                    };
                    match receiver(i, socks, stop_rx, st) {
                        Ok(h) => h,
                        Err(e) => {
                            let _ = out.send(Msg::Failed(format!("receiver {i}: {e:#}")));
                            Vec::new()
                        }
                    }
                })
                .context("cannot start a receiver thread")?;
            self.stops.push(stop_tx);
            self.receiving.push(h);
        }
        Ok(())
    }

    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut left = self.sending.len() + self.receiving.len();
        while left > 0 {
            let wait = deadline.saturating_duration_since(Instant::now());
            match self.msgs.recv_timeout(wait) {
                Ok(Msg::Ready { role, thread, tid }) => {
                    let tids = match role {
                        Role::Sender => &mut self.sender_tids,
                        Role::Receiver => &mut self.receiver_tids,
                    };
                    if let Some(t) = tids.get_mut(thread) {
                        *t = tid;
                    }
                    left -= 1;
                }
                Ok(Msg::Failed(m)) => bail!("{m}"),
                Ok(_) => {}
                Err(_) => bail!("the sending and receiving threads did not start in 30 s"),
            }
        }
        Ok(())
    }

    /// Stops every thread (receivers first, so that no receiver sees a connection close
    /// while it still runs) and returns the receivers' per-burst histograms.
    fn finish(&mut self) -> anyhow::Result<Vec<Vec<Hist>>> {
        for s in self.stops.drain(..) {
            let _ = s.send(());
        }
        let mut hists = Vec::new();
        let mut panicked = false;
        for h in self.receiving.drain(..) {
            match h.join() {
                Ok(v) => hists.push(v),
                Err(_) => panicked = true,
            }
        }
        self.cmds.clear();
        for h in self.sending.drain(..) {
            panicked |= h.join().is_err();
        }
        ensure!(!panicked, "a sending or receiving thread panicked");
        Ok(hists)
    }
}

/// `v` in `k` parts whose sizes differ by at most one.
fn split<T>(v: Vec<T>, k: usize) -> Vec<Vec<T>> {
    let n = v.len();
    let mut it = v.into_iter();
    (0..k)
        .map(|i| it.by_ref().take(n / k + usize::from(i < n % k)).collect())
        .collect()
}

fn current_thread_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start a runtime")
}

fn tid() -> i32 {
    rustix::thread::gettid().as_raw_nonzero().get()
}

/// A sending thread: on each burst command, one write of the event to each connection.
fn sender(
    thread: usize,
    socks: Vec<std::net::TcpStream>,
    mut cmds: tmpsc::UnboundedReceiver<Cmd>,
    out: &mpsc::Sender<Msg>,
    size: usize,
) -> anyhow::Result<()> {
    let rt = current_thread_runtime()?;
    rt.block_on(async move {
        let socks = socks
            .into_iter()
            .map(TcpStream::from_std)
            .collect::<Result<Vec<_>, _>>()?;
        let _ = out.send(Msg::Ready {
            role: Role::Sender,
            thread,
            tid: tid(),
        });
        while let Some(Cmd::Burst(burst)) = cmds.recv().await {
            let t0 = now_us();
            let bytes = chunk(burst, t0, size);
            let mut blocked = 0;
            for s in &socks {
                write_whole(s, &bytes, &mut blocked)
                    .await
                    .context("write")?;
            }
            let last_write_us = now_us().saturating_sub(t0);
            let _ = out.send(Msg::Sent {
                burst,
                last_write_us,
                blocked,
            });
        }
        // The sockets close here.
        anyhow::Ok(())
    })
}

/// Writes `bytes` with one `write` when the socket takes it all (it should: the send buffer
/// is empty); otherwise waits for room, counting the waits in `blocked`.
async fn write_whole(s: &TcpStream, bytes: &[u8], blocked: &mut u64) -> std::io::Result<()> {
    let mut off = 0;
    while off < bytes.len() {
        match s.try_write(&bytes[off..]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(k) => off += k,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                *blocked += 1;
                s.writable().await?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One receiving thread's records.
struct RecvState {
    thread: usize,
    /// Connections of this thread: events per burst.
    share: u64,
    hists: Vec<Hist>,
    counts: Vec<u64>,
    arrived: Arc<Vec<AtomicU64>>,
    out: mpsc::Sender<Msg>,
    failed: bool,
}

impl RecvState {
    fn record(&mut self, burst: u32, latency_us: u64) -> Result<(), String> {
        let b = burst as usize;
        let (Some(h), Some(c), Some(all)) = (
            self.hists.get_mut(b),
            self.counts.get_mut(b),
            self.arrived.get(b),
        ) else {
            return Err(format!("an event of burst {burst}, which was never sent"));
        };
        h.record_us(latency_us);
        *c += 1;
        all.fetch_add(1, Ordering::Relaxed);
        if *c == self.share {
            let _ = self.out.send(Msg::Received { burst });
        }
        Ok(())
    }

    fn fail(&mut self, what: &str) {
        if !self.failed {
            self.failed = true;
            let _ = self
                .out
                .send(Msg::Failed(format!("receiver {}: {what}", self.thread)));
        }
    }
}

/// A receiving thread: one task per connection until told to stop; returns its per-burst
/// histograms.
fn receiver(
    thread: usize,
    socks: Vec<std::net::TcpStream>,
    stop: oneshot::Receiver<()>,
    st: RecvState,
) -> anyhow::Result<Vec<Hist>> {
    let rt = current_thread_runtime()?;
    let local = tokio::task::LocalSet::new();
    let st = Rc::new(RefCell::new(st));
    let out = st.borrow().out.clone();
    local.block_on(&rt, async {
        for s in socks {
            let s = TcpStream::from_std(s)?;
            tokio::task::spawn_local(receive(s, st.clone()));
        }
        let _ = out.send(Msg::Ready {
            role: Role::Receiver,
            thread,
            tid: tid(),
        });
        // Stop when told to, or when the main thread is gone.
        let _ = stop.await;
        anyhow::Ok(())
    })?;
    // Drops the tasks and closes the sockets.
    drop(local);
    let hists = std::mem::take(&mut st.borrow_mut().hists);
    Ok(hists)
}

/// One connection's receiving end: reads, decodes the chunked body and the SSE events with the
/// load generator's decoder and parser, records each event.
async fn receive(mut s: TcpStream, st: Rc<RefCell<RecvState>>) {
    let mut buf = vec![0u8; READ_BUF];
    let mut body = BodyDecoder::new(&Framing::Chunked);
    let mut sse = usher_sse::Parser::new();
    loop {
        let n = match s.read(&mut buf).await {
            Ok(0) => return st.borrow_mut().fail("a connection closed early"),
            Ok(n) => n,
            Err(e) => return st.borrow_mut().fail(&format!("read: {e}")),
        };
        let now = now_us();
        let mut items = Vec::new();
        if let Err(e) = body.decode(&buf[..n], &mut |payload| sse.push_into(payload, &mut items)) {
            return st.borrow_mut().fail(&format!("chunked body: {e}"));
        }
        for item in items {
            let Item::Event(e) = item else { continue };
            let Some((burst, t0)) = stamp(&e.id) else {
                return st
                    .borrow_mut()
                    .fail(&format!("an event id that is not <burst>.<t0>: {}", e.id));
            };
            if let Err(m) = st.borrow_mut().record(burst, now.saturating_sub(t0)) {
                return st.borrow_mut().fail(&m);
            }
        }
    }
}

/// On-CPU time of one thread of this process in ns (user + system, including the softirq
/// work done in its context), from `/proc/self/task/<tid>/schedstat`.
fn thread_cpu_ns(tid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

fn threads_cpu_ns(tids: &[i32]) -> Option<u64> {
    tids.iter().map(|&t| thread_cpu_ns(t)).sum()
}

/// All CPUs' time from `/proc/stat`, in ticks.
#[derive(Debug, Clone, Copy)]
struct MachineCpu {
    busy: u64,
    softirq: u64,
    steal: u64,
}

fn machine_cpu() -> Option<MachineCpu> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    let line = s.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal ...
    let at = |i: usize| v.get(i).copied();
    Some(MachineCpu {
        busy: at(0)? + at(1)? + at(2)? + at(5)? + at(6)?,
        softirq: at(6)?,
        steal: at(7)?,
    })
}

struct Measured {
    /// Per burst: the latest last write over the senders, µs after its t0.
    last_write_us: Vec<u64>,
    blocked: u64,
    sender_cpu_ns: Option<u64>,
    receiver_cpu_ns: Option<u64>,
    machine: Option<(MachineCpu, MachineCpu)>,
}

fn measure(a: &Args, crew: &Crew) -> anyhow::Result<Measured> {
    let n = a.connections as u64;
    let interval = Duration::from_millis(a.interval_ms);
    let first = Instant::now() + interval;
    let mut m = Measured {
        last_write_us: Vec::new(),
        blocked: 0,
        sender_cpu_ns: None,
        receiver_cpu_ns: None,
        machine: None,
    };
    let mut before = (None, None, None);
    for burst in 0..a.bursts {
        let at = first + interval * burst;
        std::thread::sleep(at.saturating_duration_since(Instant::now()));
        if burst == 0 {
            // Every thread is idle here: their counters are up to date.
            before = (
                threads_cpu_ns(&crew.sender_tids),
                threads_cpu_ns(&crew.receiver_tids),
                machine_cpu(),
            );
        }
        let started = Instant::now();
        for c in &crew.cmds {
            c.send(Cmd::Burst(burst))
                .map_err(|_| anyhow::anyhow!("a sender thread is gone"))?;
        }
        let (mut sent, mut received, mut last) = (0, 0, 0);
        while sent < crew.cmds.len() || received < crew.stops.len() {
            let wait = (started + BURST_DEADLINE).saturating_duration_since(Instant::now());
            match crew.msgs.recv_timeout(wait) {
                Ok(Msg::Sent {
                    burst: b,
                    last_write_us,
                    blocked,
                }) if b == burst => {
                    sent += 1;
                    last = last.max(last_write_us);
                    m.blocked += blocked;
                }
                Ok(Msg::Received { burst: b }) if b == burst => received += 1,
                Ok(Msg::Failed(msg)) => bail!("burst {}: {msg}", burst + 1),
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let got = crew
                        .arrived
                        .get(burst as usize)
                        .map_or(0, |c| c.load(Ordering::Relaxed));
                    return Err(Missing(format!(
                        "burst {}: only {got} of {n} events arrived within {} s of its start \
                         ({sent} of {} sending threads had finished writing)",
                        burst + 1,
                        BURST_DEADLINE.as_secs(),
                        crew.cmds.len()
                    ))
                    .into());
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    bail!(
                        "burst {}: the sending and receiving threads are gone",
                        burst + 1
                    )
                }
            }
        }
        m.last_write_us.push(last);
    }
    // Let the threads go idle, so that their CPU counters are current.
    std::thread::sleep(Duration::from_millis(20));
    let after = (
        threads_cpu_ns(&crew.sender_tids),
        threads_cpu_ns(&crew.receiver_tids),
        machine_cpu(),
    );
    m.sender_cpu_ns = before.0.zip(after.0).map(|(b, a)| a.saturating_sub(b));
    m.receiver_cpu_ns = before.1.zip(after.1).map(|(b, a)| a.saturating_sub(b));
    m.machine = before.2.zip(after.2);
    Ok(m)
}

fn ms(us: u64) -> f64 {
    round_to(us as f64 / 1000.0, 3)
}

fn report(a: &Args, setup_ms: f64, source_ips: usize, m: &Measured, hists: &[Vec<Hist>]) {
    let events = a.connections as u64 * u64::from(a.bursts);
    let mut overall = Hist::new();
    let mut per_burst = Vec::new();
    let mut lines = Vec::new();
    for (b, last) in m.last_write_us.iter().enumerate() {
        let mut h = Hist::new();
        for thread in hists {
            if let Some(t) = thread.get(b) {
                h.add_buckets(&t.to_buckets());
            }
        }
        overall.add_buckets(&h.to_buckets());
        let s = h.summary();
        lines.push(format!(
            "  burst {}: p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms  last write {:.3} ms",
            b + 1,
            s.p50_ms,
            s.p99_ms,
            s.max_ms,
            ms(*last)
        ));
        per_burst.push(json!({
            "burst": b + 1,
            "events": s.count,
            "p50_ms": s.p50_ms,
            "p99_ms": s.p99_ms,
            "max_ms": s.max_ms,
            "last_write_ms": ms(*last),
        }));
    }
    let per_event = |ns: Option<u64>| ns.map(|ns| round_to(ns as f64 / 1000.0 / events as f64, 3));
    let ticks_per_event = |t: u64| round_to(t as f64 * 1e6 / USER_HZ as f64 / events as f64, 3);
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    let (busy, softirq, steal_ms) = match m.machine {
        Some((b, a)) => (
            Some(ticks_per_event(a.busy.saturating_sub(b.busy))),
            Some(ticks_per_event(a.softirq.saturating_sub(b.softirq))),
            Some(a.steal.saturating_sub(b.steal) * 1000 / USER_HZ),
        ),
        None => (None, None, None),
    };
    let o = overall.summary();
    let sender_cpu = per_event(m.sender_cpu_ns);
    let receiver_cpu = per_event(m.receiver_cpu_ns);
    let out = json!({
        "connections": a.connections,
        "bursts": a.bursts,
        "interval_ms": a.interval_ms,
        "event_bytes": a.event_bytes,
        "bytes_per_write": chunk(0, now_us(), a.event_bytes).len(),
        "senders": a.senders,
        "receivers": a.receivers,
        "source_ips": source_ips,
        "setup_ms": round_to(setup_ms, 1),
        "per_burst": per_burst,
        "overall": {
            "events": o.count,
            "p50_ms": o.p50_ms,
            "p90_ms": o.p90_ms,
            "p99_ms": o.p99_ms,
            "p999_ms": o.p999_ms,
            "max_ms": o.max_ms,
        },
        "sender_cpu_us_per_event": sender_cpu,
        "receiver_cpu_us_per_event": receiver_cpu,
        "blocked_writes": m.blocked,
        "machine": {
            "nproc": nproc,
            "kernel": kernel,
            "busy_cpu_us_per_event": busy,
            "softirq_cpu_us_per_event": softirq,
            "steal_ms": steal_ms,
        },
    });
    println!("{out}");
    let opt = |x: Option<f64>| x.map_or_else(|| "?".to_owned(), |v| format!("{v:.1}"));
    eprintln!(
        "usher-floor: {} connections, {} bursts of one {}-byte write each, {} sender / {} \
         receiver thread(s), {nproc} CPUs",
        a.connections,
        a.bursts,
        chunk(0, now_us(), a.event_bytes).len(),
        a.senders,
        a.receivers
    );
    for l in lines {
        eprintln!("{l}");
    }
    eprintln!(
        "  overall: p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms  max {:.3} ms",
        o.p50_ms, o.p90_ms, o.p99_ms, o.max_ms
    );
    eprintln!(
        "  CPU per event: sender {} µs, receiver {} µs (all CPUs busy: {} µs)",
        opt(sender_cpu),
        opt(receiver_cpu),
        opt(busy)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_round_trip() {
        let c = chunk(3, 1_700_000_000_123_456, 600);
        assert_eq!(frame(3, 1, 600).len(), 600);
        assert_eq!(c.len(), 3 + 2 + 600 + 2);
        let (mut body, mut sse) = (
            BodyDecoder::new(&Framing::Chunked),
            usher_sse::Parser::new(),
        );
        let mut items = Vec::new();
        // In two pieces, as a read may return them.
        for piece in [&c[..100], &c[100..]] {
            body.decode(piece, &mut |p| sse.push_into(p, &mut items))
                .expect("a valid chunk");
        }
        let [Item::Event(e)] = items.as_slice() else {
            panic!("one event: {items:?}")
        };
        assert_eq!(stamp(&e.id), Some((3, 1_700_000_000_123_456)));
        assert_eq!(stamp("25"), None);
        assert!(BodyDecoder::new(&Framing::Chunked)
            .decode(b"zz\r\n", &mut |_| {})
            .is_err());
    }

    #[test]
    fn split_is_even() {
        let parts = split((0..10).collect::<Vec<_>>(), 3);
        let sizes: Vec<usize> = parts.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![4, 3, 3]);
        assert_eq!(parts.concat(), (0..10).collect::<Vec<_>>());
    }
}
