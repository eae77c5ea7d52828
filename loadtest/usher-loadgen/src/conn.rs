//! One simulated browser's connection: an `EventSource` over a bare `TcpSocket` bound to its
//! source address, from its first request until it is admitted, closed, fails or leaves,
//! reconnecting (with `Last-Event-ID`, after `retry:`) whenever a stream ends. Between events
//! it keeps the SSE parser's small state, nothing more: reads go through one buffer per
//! worker thread ([`crate::open::read_with`]).
//!
//! Split by concern: [`crate::open`] opens a stream (connect, request, response head),
//! [`crate::browser`] reacts to what a stream says, [`crate::recorder`] keeps the figures.

use std::net::IpAddr;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::browser::{Body, Final, State};
use crate::http::Framing;
use crate::linger::Lingering;
pub use crate::open::{connect, OpenError};
use crate::open::{open, read_with, Opened};
use crate::plan::{Gateway, Plan};
use crate::recorder::inc;
pub use crate::recorder::{now_us, Recorder};

/// What every connection of a worker shares.
pub struct Ctx {
    pub gateways: Vec<Gateway>,
    pub source_ips: Vec<IpAddr>,
    pub path: String,
    pub connect_timeout: Duration,
    pub idle_timeout: Duration,
    pub default_retry: Duration,
    /// Finished connections kept open a while (`--linger-ms`, [`crate::linger`]).
    pub lingering: Arc<Lingering>,
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
            lingering: Arc::new(Lingering::new(Duration::from_millis(plan.linger_ms))),
            rec,
            leave_per_minute: plan.leave_per_minute,
            seed: plan.seed,
            queue: plan.queue.clone(),
        }
    }
}

enum Flow {
    /// Wait `retry` and reconnect.
    Retry,
    Final(Final),
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
        open(
            &ctx.path,
            gw,
            source,
            st.ticket.as_deref(),
            st.pow.as_deref(),
        ),
    )
    .await;
    let Opened {
        mut stream,
        head,
        body: first_bytes,
    } = match opened {
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
    let mut body = Body::new(&head.framing);
    // The idle timeout: one timer per stream, not one per read. It is armed for
    // `idle_timeout` after the last byte read; when it fires early (bytes came since it was
    // set) it is re-armed from the last byte, so it fires exactly `idle_timeout` after the
    // last byte, as a fresh timer per read would, at a timer operation per `idle_timeout`
    // instead of one per event.
    let mut last_byte = Instant::now();
    let mut idle = pin!(tokio::time::sleep(ctx.idle_timeout));
    // The moment a browser whose patience ran out leaves (`crate::leaving`): one timer too,
    // armed once the browser holds a place (has a ticket), never re-made per event.
    let mut leave = pin!(until(None));
    let mut leave_armed = false;
    // What came with the head, then each read (through the worker's one buffer: `read_with`).
    let mut fed = body.feed(&first_bytes, rec, st);
    drop(first_bytes);
    loop {
        match fed {
            Err(_) => {
                rec.error("parse");
                return Flow::Retry;
            }
            Ok(Some(f)) => {
                // Spread by the sub-millisecond part of when this connection started:
                // arbitrary enough.
                let spread = u64::from(st.started.elapsed().subsec_nanos()) / 1000;
                ctx.lingering.keep(stream, spread);
                return Flow::Final(f);
            }
            Ok(None) => {}
        }
        if body.is_done() {
            break;
        }
        if !leave_armed {
            if let Some(at) = st.leaves_at.filter(|_| st.ticket.is_some()) {
                leave.set(until(Some(at)));
                leave_armed = true;
            }
        }
        // `biased`: polled in this order, without drawing a random number per event.
        let read = tokio::select! {
            biased;
            r = read_with(&mut stream, |bytes| {
                (!bytes.is_empty()).then(|| body.feed(bytes, rec, st))
            }) => r,
            () = &mut idle => {
                let quiet_until = last_byte + ctx.idle_timeout;
                if Instant::now() < quiet_until {
                    idle.as_mut().reset(quiet_until.into());
                    fed = Ok(None);
                    continue;
                }
                rec.error("idle_timeout");
                return Flow::Retry;
            }
            () = &mut leave => {
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
                rec.error("io");
                return Flow::Retry;
            }
            Ok(None) => {
                if head.framing != Framing::Close {
                    rec.error("truncated");
                }
                break;
            }
            Ok(Some(r)) => {
                last_byte = Instant::now();
                fed = r;
            }
        }
    }
    if !body.any_event {
        inc(&rec.empty_streams);
    }
    Flow::Retry
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use usher_core::ids::QueueId;

    use super::*;

    fn ctx(addr: SocketAddr, idle_timeout: Duration) -> Ctx {
        Ctx {
            gateways: vec![Gateway {
                url: format!("http://{addr}"),
                addr,
                host: addr.to_string(),
            }],
            source_ips: Vec::new(),
            path: "/api/queues/q/stream".into(),
            connect_timeout: Duration::from_secs(5),
            idle_timeout,
            default_retry: Duration::from_millis(100),
            lingering: Arc::new(Lingering::new(Duration::ZERO)),
            rec: Arc::new(Recorder::new(1)),
            leave_per_minute: 0.0,
            seed: 1,
            queue: "q".into(),
        }
    }

    fn state(rec: &Arc<Recorder>) -> State {
        State {
            rec: rec.clone(),
            ticket: None,
            retry: Duration::from_millis(100),
            started: Instant::now(),
            arrived_ms: now_us() / 1000,
            leaves_at: None,
            joined: false,
            in_line: false,
            challenge: None,
            pow: None,
        }
    }

    /// One timer per stream still times out exactly `idle_timeout` after the last byte:
    /// keepalives every 100 ms for 600 ms keep a 300 ms idle timeout from firing (a timer
    /// armed once at the start would fire at 300 ms); silence after them ends the stream
    /// with one `idle_timeout` error.
    #[tokio::test]
    async fn the_idle_timeout_counts_from_the_last_byte() -> anyhow::Result<()> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await?;
            let mut req = [0u8; 1024];
            let _ = sock.read(&mut req).await?;
            let q = QueueId::new("q").map_err(|e| anyhow::anyhow!("{e}"))?;
            sock.write_all(&crate::joins_floor::stream_response(
                &q,
                100,
                now_us() / 1000,
            ))
            .await?;
            for _ in 0..6 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                sock.write_all(b"d\r\n: keepalive\n\n\r\n").await?;
            }
            // Hold the connection open, silent, until the client gives up on it.
            let _ = sock.read(&mut req).await;
            anyhow::Ok(())
        });
        let ctx = ctx(addr, Duration::from_millis(300));
        let mut st = state(&ctx.rec);
        let started = Instant::now();
        let flow = attempt(&ctx, &ctx.gateways[0], None, &mut st).await;
        let took = started.elapsed();
        assert!(matches!(flow, Flow::Retry));
        assert!(
            took >= Duration::from_millis(850),
            "timed out after {took:?}"
        );
        assert!(took < Duration::from_secs(3), "timed out after {took:?}");
        let c = ctx.rec.counters();
        assert_eq!((c.joined, c.waiting_events, c.errors), (1, 1, 1), "{c:?}");
        let result = ctx.rec.result(0, 0);
        assert_eq!(result.errors.get("idle_timeout"), Some(&1));
        assert_eq!(st.ticket.as_deref(), Some("q.1.AAAAAAAAAAAAAAAAAAAAAA"));
        assert_eq!(st.retry, Duration::from_millis(100));
        drop(st);
        server.await??;
        Ok(())
    }
}
