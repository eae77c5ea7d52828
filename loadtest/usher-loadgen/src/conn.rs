//! One simulated browser: an `EventSource` over a bare `TcpSocket` bound to its source
//! address. It keeps a 2 KiB read buffer and the SSE parser's small state, nothing more.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::Notify;
use usher_core::challenge::ChallengeEvent;
use usher_core::messages::{AdmittedEvent, ClosedEvent, WaitingEvent};
use usher_sse::{Event, Item, Parser};

use crate::http::{self, BodyDecoder, Framing, Head};
use crate::plan::{Gateway, Plan};
use crate::proto::{AdmissionRecord, Counters, WorkerResult};
use crate::stats::{fingerprint, Hist};

/// Read buffer per connection (it also holds the response head, growing up to
/// [`http::MAX_HEAD`] only for an unusually large head).
const READ_BUF: usize = 2048;

/// Microseconds since the Unix epoch.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Everything a worker's connections record. Counters are atomics; samples go under a
/// mutex held for a few instructions.
#[derive(Default)]
pub struct Recorder {
    started: AtomicU64,
    connected: AtomicU64,
    waiting: AtomicU64,
    joined: AtomicU64,
    admitted: AtomicU64,
    closed: AtomicU64,
    failed: AtomicU64,
    left: AtomicU64,
    errors: AtomicU64,
    reconnects: AtomicU64,
    empty_streams: AtomicU64,
    waiting_events: AtomicU64,
    slow_joins: AtomicU64,
    challenges: AtomicU64,
    pow_hashes: AtomicU64,
    /// Connections in a final state; `all_finished` fires when it reaches `assigned`.
    finished: AtomicU64,
    assigned: u64,
    pub all_finished: Notify,
    samples: Mutex<Samples>,
}

#[derive(Default)]
struct Samples {
    join: Hist,
    position_update: Hist,
    admission: Hist,
    errors: BTreeMap<String, u64>,
    closed_reasons: BTreeMap<String, u64>,
    admissions: Vec<AdmissionRecord>,
    /// Arrival and admission of each admitted connection (`crate::waits`).
    waits: Vec<crate::waits::WaitRecord>,
    /// First and last join completion, µs since the epoch.
    join_span_us: Option<(u64, u64)>,
}

fn inc(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

impl Recorder {
    pub fn new(assigned: u64) -> Self {
        Self {
            assigned,
            ..Self::default()
        }
    }

    fn samples(&self) -> std::sync::MutexGuard<'_, Samples> {
        self.samples.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn counters(&self) -> Counters {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Counters {
            started: g(&self.started),
            connected: g(&self.connected),
            waiting: g(&self.waiting),
            joined: g(&self.joined),
            admitted: g(&self.admitted),
            closed: g(&self.closed),
            failed: g(&self.failed),
            left: g(&self.left),
            errors: g(&self.errors),
            reconnects: g(&self.reconnects),
            empty_streams: g(&self.empty_streams),
            waiting_events: g(&self.waiting_events),
            slow_joins: g(&self.slow_joins),
            challenges: g(&self.challenges),
            pow_hashes: g(&self.pow_hashes),
        }
    }

    pub fn error(&self, kind: &str) {
        inc(&self.errors);
        *self.samples().errors.entry(kind.to_owned()).or_default() += 1;
    }

    fn finish(&self) {
        let n = self.finished.fetch_add(1, Ordering::AcqRel) + 1;
        if n >= self.assigned {
            // notify_one stores a permit, so a waiter that arrives later still wakes.
            self.all_finished.notify_one();
        }
    }

    /// The worker's result so far.
    pub fn result(&self, worker: u32, elapsed_ms: u64) -> WorkerResult {
        let counters = self.counters();
        let s = self.samples();
        WorkerResult {
            worker,
            pid: std::process::id(),
            assigned: self.assigned,
            elapsed_ms,
            counters,
            errors: s.errors.clone(),
            closed_reasons: s.closed_reasons.clone(),
            join: s.join.to_buckets(),
            position_update: s.position_update.to_buckets(),
            admission: s.admission.to_buckets(),
            admissions: s.admissions.clone(),
            join_span_us: s.join_span_us,
            waits: s.waits.clone(),
            cpu_s: crate::cpu::own_cpu_s(),
        }
    }
}

/// What every connection of a worker shares.
pub struct Ctx {
    pub gateways: Vec<Gateway>,
    pub source_ips: Vec<IpAddr>,
    pub path: String,
    pub connect_timeout: Duration,
    pub idle_timeout: Duration,
    pub default_retry: Duration,
    pub linger: Duration,
    pub rec: Arc<Recorder>,
    /// `--leave-per-minute` and `--seed` (`crate::leaving`), and the queue left.
    pub leave_per_minute: f64,
    pub seed: u64,
    pub queue: String,
}

impl Ctx {
    pub fn new(plan: &Plan, rec: Arc<Recorder>) -> Self {
        Self {
            gateways: plan.gateways.clone(),
            source_ips: plan.source_ips.clone(),
            path: plan.stream_path(),
            connect_timeout: Duration::from_secs(plan.connect_timeout_secs),
            idle_timeout: Duration::from_secs(plan.idle_timeout_secs),
            default_retry: Duration::from_millis(plan.default_retry_ms),
            linger: Duration::from_millis(plan.linger_ms),
            rec,
            leave_per_minute: plan.leave_per_minute,
            seed: plan.seed,
            queue: plan.queue.clone(),
        }
    }
}

/// How a connection ended for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Final {
    Admitted,
    Closed,
    Failed,
    /// Left the line when its patience ran out (`crate::leaving`).
    Left,
}

enum Flow {
    /// Wait `retry` and reconnect.
    Retry,
    Final(Final),
}

/// Per-connection state that survives reconnects. Dropping it (also when the task is
/// aborted at the end of the run) takes the connection out of the `waiting` gauge.
struct State {
    rec: Arc<Recorder>,
    ticket: Option<String>,
    retry: Duration,
    started: Instant,
    /// When the browser arrived (the connection was started), ms since the epoch.
    arrived_ms: u64,
    /// When it gives up waiting (`--leave-per-minute`).
    leaves_at: Option<Instant>,
    /// Got its first `waiting` event.
    joined: bool,
    /// Counted in the `waiting` gauge.
    in_line: bool,
    /// A proof-of-work puzzle to solve before the next join (`event: challenge`) ...
    challenge: Option<ChallengeEvent>,
    /// ... and the solution the next join sends (`?pow=`).
    pow: Option<String>,
}

impl State {
    fn leave_line(&mut self) {
        if std::mem::take(&mut self.in_line) {
            self.rec.waiting.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for State {
    fn drop(&mut self) {
        self.leave_line();
    }
}

/// Counts an open stream for as long as it lives.
struct Connected(Arc<Recorder>);

impl Connected {
    fn new(rec: &Arc<Recorder>) -> Self {
        inc(&rec.connected);
        Self(rec.clone())
    }
}

impl Drop for Connected {
    fn drop(&mut self) {
        self.0.connected.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Runs connection number `index` (global over all workers) like a browser's `EventSource`
/// until it is admitted, closed or fails; the caller bounds it in time.
pub async fn run(ctx: Arc<Ctx>, index: u64) {
    let rec = ctx.rec.clone();
    inc(&rec.started);
    let source = match ctx.source_ips.len() {
        0 => None,
        n => Some(ctx.source_ips[(index % n as u64) as usize]),
    };
    let mut st = State {
        rec: rec.clone(),
        ticket: None,
        retry: ctx.default_retry,
        started: Instant::now(),
        arrived_ms: now_us() / 1000,
        leaves_at: crate::leaving::patience(ctx.seed, index, ctx.leave_per_minute)
            .map(|d| Instant::now() + d),
        joined: false,
        in_line: false,
        challenge: None,
        pow: None,
    };
    let mut next_gw = (index % ctx.gateways.len() as u64) as usize;
    let mut first = true;
    let outcome = loop {
        if !first {
            inc(&rec.reconnects);
        }
        first = false;
        let gw = &ctx.gateways[next_gw % ctx.gateways.len()];
        next_gw = next_gw.wrapping_add(1);
        match attempt(&ctx, gw, source, &mut st).await {
            Flow::Final(f) => break f,
            // A proof-of-work queue refused the join: solve (on a blocking thread: it is all
            // CPU) and join again at once, as the page does.
            Flow::Retry if st.challenge.is_some() => solve(&rec, &mut st).await,
            Flow::Retry => tokio::time::sleep(st.retry).await,
        }
    };
    st.leave_line();
    match outcome {
        Final::Admitted => inc(&rec.admitted),
        Final::Closed => inc(&rec.closed),
        Final::Failed => inc(&rec.failed),
        Final::Left => inc(&rec.left),
    }
    rec.finish();
}

/// Solves the pending puzzle and keeps the solution for the next join.
async fn solve(rec: &Recorder, st: &mut State) {
    let Some(c) = st.challenge.take() else { return };
    let puzzle = c.puzzle;
    let solved = tokio::task::spawn_blocking(move || {
        let (nonce, hashes) = usher_pow::solve(&puzzle, c.difficulty, 0);
        (format!("{puzzle}.{nonce}"), hashes)
    })
    .await;
    match solved {
        Ok((solution, hashes)) => {
            rec.pow_hashes.fetch_add(hashes, Ordering::Relaxed);
            st.pow = Some(solution);
        }
        Err(_) => rec.error("pow_solver"),
    }
}

/// The step at which opening a stream failed (counted as an error of that kind).
#[derive(Debug)]
pub enum OpenError {
    Socket,
    Bind,
    Connect,
    Io,
    Eof,
    Http,
}

impl OpenError {
    pub fn kind(&self) -> &'static str {
        match self {
            OpenError::Socket => "socket",
            OpenError::Bind => "bind",
            OpenError::Connect => "connect",
            OpenError::Io => "io",
            OpenError::Eof => "eof_before_head",
            OpenError::Http => "parse",
        }
    }
}

/// A TCP connection to `target` with `TCP_NODELAY`, from `source` when given (bound first, so
/// every source address brings its own ephemeral ports).
pub async fn connect(target: SocketAddr, source: Option<IpAddr>) -> Result<TcpStream, OpenError> {
    let sock = if target.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|_| OpenError::Socket)?;
    if let Some(ip) = source {
        sock.bind(SocketAddr::new(ip, 0))
            .map_err(|_| OpenError::Bind)?;
    }
    let stream = sock.connect(target).await.map_err(|_| OpenError::Connect)?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Connects, sends the request and reads the response head. Returns the stream, the head,
/// the buffer and how many bytes of it are filled (the body starts at `head.len`).
async fn open(
    ctx: &Ctx,
    gw: &Gateway,
    source: Option<IpAddr>,
    ticket: Option<&str>,
    pow: Option<&str>,
) -> Result<(TcpStream, Head, Vec<u8>, usize), OpenError> {
    let mut stream = connect(gw.addr, source).await?;
    let req = match pow.filter(|_| ticket.is_none()) {
        Some(solution) => {
            let sep = if ctx.path.contains('?') { '&' } else { '?' };
            http::request(
                &format!("{}{sep}pow={solution}", ctx.path),
                &gw.host,
                ticket,
            )
        }
        None => http::request(&ctx.path, &gw.host, ticket),
    };
    stream.write_all(&req).await.map_err(|_| OpenError::Io)?;
    let mut buf = vec![0u8; READ_BUF];
    let mut filled = 0;
    loop {
        if filled == buf.len() {
            if buf.len() >= http::MAX_HEAD {
                return Err(OpenError::Http);
            }
            buf.resize((buf.len() * 2).min(http::MAX_HEAD), 0);
        }
        let n = stream
            .read(&mut buf[filled..])
            .await
            .map_err(|_| OpenError::Io)?;
        if n == 0 {
            return Err(OpenError::Eof);
        }
        filled += n;
        match http::parse_head(&buf[..filled]) {
            Ok(Some(head)) => {
                if buf.len() > READ_BUF {
                    // Keep the steady-state buffer small; move the body bytes down.
                    let rest = buf[head.len..filled].to_vec();
                    let mut small = vec![0u8; READ_BUF.max(rest.len())];
                    small[..rest.len()].copy_from_slice(&rest);
                    let len = rest.len();
                    return Ok((stream, Head { len: 0, ..head }, small, len));
                }
                return Ok((stream, head, buf, filled));
            }
            Ok(None) => {}
            Err(_) => return Err(OpenError::Http),
        }
    }
}

/// Sleeps until `at`; never returns without one.
async fn until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// One request: returns whether to reconnect or stop for good.
async fn attempt(ctx: &Ctx, gw: &Gateway, source: Option<IpAddr>, st: &mut State) -> Flow {
    let rec = &ctx.rec;
    let opened = tokio::time::timeout(
        ctx.connect_timeout,
        open(ctx, gw, source, st.ticket.as_deref(), st.pow.as_deref()),
    )
    .await;
    let (mut stream, head, mut buf, filled) = match opened {
        Err(_) => {
            rec.error("connect_timeout");
            return Flow::Retry;
        }
        Ok(Err(e)) => {
            rec.error(e.kind());
            return Flow::Retry;
        }
        Ok(Ok(x)) => x,
    };
    if head.status != 200 {
        // EventSource gives up on any other status.
        rec.error(&format!("status_{}", head.status));
        return Flow::Final(Final::Failed);
    }
    if !head
        .content_type
        .as_deref()
        .is_some_and(|c| c.starts_with("text/event-stream"))
    {
        rec.error("content_type");
        return Flow::Final(Final::Failed);
    }
    let _connected = Connected::new(&ctx.rec);
    let mut body = Body {
        decoder: BodyDecoder::new(&head.framing),
        parser: Parser::new(),
        items: Vec::new(),
        any_event: false,
    };
    let mut start = head.len;
    let mut end = filled;
    loop {
        if start < end {
            if body.feed(&buf[start..end]).is_err() {
                rec.error("parse");
                return Flow::Retry;
            }
            for item in body.items.drain(..) {
                if let Some(f) = handle(ctx, st, item) {
                    linger(ctx, stream, st.started);
                    return Flow::Final(f);
                }
            }
        }
        if body.decoder.is_done() {
            break;
        }
        // A browser whose patience ran out while it holds a place leaves (`crate::leaving`).
        let leaves_at = st.leaves_at.filter(|_| st.ticket.is_some());
        let read = tokio::select! {
            r = tokio::time::timeout(ctx.idle_timeout, stream.read(&mut buf)) => r,
            () = until(leaves_at) => {
                let ticket = st.ticket.clone().unwrap_or_default();
                let sent = match connect(gw.addr, source).await {
                    Ok(s) => {
                        crate::leaving::leave(s, gw, &ctx.queue, &ticket, ctx.connect_timeout).await
                    }
                    Err(_) => None,
                };
                return match sent {
                    Some(204) => Flow::Final(Final::Left),
                    Some(status) => {
                        rec.error(&format!("leave_status_{status}"));
                        Flow::Final(Final::Failed)
                    }
                    None => {
                        rec.error("leave");
                        Flow::Final(Final::Failed)
                    }
                };
            }
        };
        match read {
            Err(_) => {
                rec.error("idle_timeout");
                return Flow::Retry;
            }
            Ok(Err(_)) => {
                rec.error("io");
                return Flow::Retry;
            }
            Ok(Ok(0)) => {
                if head.framing != Framing::Close {
                    rec.error("truncated");
                }
                break;
            }
            Ok(Ok(n)) => (start, end) = (0, n),
        }
    }
    if !body.any_event {
        inc(&rec.empty_streams);
    }
    Flow::Retry
}

/// Keeps a finished connection open and idle for a while, as a browser's connection pool
/// does, then closes it; spread over 50–150% of `--linger-ms` so closes do not come in bursts.
fn linger(ctx: &Ctx, stream: TcpStream, started: Instant) {
    if ctx.linger.is_zero() {
        return;
    }
    // Spread by the sub-millisecond part of when this connection started: arbitrary enough.
    let spread = (started.elapsed().subsec_nanos() as u64 / 1000) % 1000;
    let wait = ctx.linger / 2 + ctx.linger.mul_f64(spread as f64 / 1000.0);
    tokio::spawn(async move {
        tokio::time::sleep(wait).await;
        drop(stream);
    });
}

struct Body {
    decoder: BodyDecoder,
    parser: Parser,
    items: Vec<Item>,
    any_event: bool,
}

impl Body {
    fn feed(&mut self, bytes: &[u8]) -> Result<(), http::HttpError> {
        let (parser, items, any) = (&mut self.parser, &mut self.items, &mut self.any_event);
        self.decoder.decode(bytes, &mut |payload| {
            let from = items.len();
            parser.push_into(payload, items);
            *any |= items[from..].iter().any(|i| matches!(i, Item::Event(_)));
        })
    }
}

/// Reacts to one SSE item; `Some` when the connection is finished.
fn handle(ctx: &Ctx, st: &mut State, item: Item) -> Option<Final> {
    let rec = &ctx.rec;
    match item {
        Item::Retry(ms) => {
            st.retry = Duration::from_millis(ms);
            None
        }
        Item::Comment(_) => None,
        Item::Event(e) => {
            if !e.id.is_empty() && st.ticket.as_deref() != Some(e.id.as_str()) {
                st.ticket = Some(e.id.clone());
            }
            match e.event.as_str() {
                "waiting" => {
                    on_waiting(rec, st, &e);
                    None
                }
                "admitted" => Some(on_admitted(rec, &e, st.arrived_ms)),
                "challenge" => {
                    inc(&rec.challenges);
                    match serde_json::from_str::<ChallengeEvent>(&e.data) {
                        Ok(c) => st.challenge = Some(c),
                        Err(_) => rec.error("parse"),
                    }
                    None
                }
                "closed" => {
                    let reason = serde_json::from_str::<ClosedEvent>(&e.data)
                        .map(|c| c.reason.to_string())
                        .unwrap_or_else(|_| "unparsable".to_owned());
                    *rec.samples().closed_reasons.entry(reason).or_default() += 1;
                    Some(Final::Closed)
                }
                _ => None,
            }
        }
    }
}

fn on_waiting(rec: &Recorder, st: &mut State, e: &Event) {
    let now = now_us();
    inc(&rec.waiting_events);
    let w: WaitingEvent = match serde_json::from_str(&e.data) {
        Ok(w) => w,
        Err(_) => {
            rec.error("parse");
            return;
        }
    };
    if !st.joined {
        // The connection's first `waiting` event: it holds a place now.
        st.joined = true;
        st.in_line = true;
        inc(&rec.waiting);
        inc(&rec.joined);
        let us = st.started.elapsed().as_micros() as u64;
        if us > crate::proto::SLOW_JOIN_MS * 1000 {
            inc(&rec.slow_joins);
        }
        let mut s = rec.samples();
        s.join.record_us(us);
        s.join_span_us = crate::proto::widen(s.join_span_us, now, now);
    } else {
        let us = now.saturating_sub(w.as_of_ms.saturating_mul(1000));
        rec.samples().position_update.record_us(us);
    }
}

fn on_admitted(rec: &Recorder, e: &Event, arrived_ms: u64) -> Final {
    let now = now_us();
    let a: AdmittedEvent = match serde_json::from_str(&e.data) {
        Ok(a) => a,
        Err(_) => {
            rec.error("parse");
            return Final::Failed;
        }
    };
    let admitted_at_ms = OffsetDateTime::parse(&a.admitted_at, &Rfc3339)
        .ok()
        .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as u64);
    let place = e.id.split('.').nth(1).and_then(|p| p.parse::<u64>().ok());
    let (Some(admitted_at_ms), Some(place)) = (admitted_at_ms, place) else {
        rec.error("parse");
        return Final::Failed;
    };
    let mut s = rec.samples();
    let latency_us = now.saturating_sub(admitted_at_ms.saturating_mul(1000));
    s.admission.record_us(latency_us);
    s.admissions.push(AdmissionRecord(
        place,
        admitted_at_ms,
        fingerprint(&a.token),
        latency_us,
    ));
    s.waits
        .push(crate::waits::WaitRecord(arrived_ms, admitted_at_ms));
    Final::Admitted
}
