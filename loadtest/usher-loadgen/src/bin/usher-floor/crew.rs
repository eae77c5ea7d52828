//! The sending and receiving threads: each with its own single-threaded runtime and an even
//! share of the connections, told by the main thread when to write a burst, telling it when
//! the writes are done and when every event of a burst has arrived.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::{mpsc as tmpsc, oneshot};
use usher_loadgen::conn::now_us;
use usher_loadgen::http::{BodyDecoder, Framing};
use usher_loadgen::stats::Hist;
use usher_sse::Item;

use crate::args::Args;
use crate::frames::{chunk, stamp};

/// The sending and receiving threads.
pub struct Crew {
    pub msgs: mpsc::Receiver<Msg>,
    pub cmds: Vec<tmpsc::UnboundedSender<Cmd>>,
    pub stops: Vec<oneshot::Sender<()>>,
    sending: Vec<JoinHandle<()>>,
    receiving: Vec<JoinHandle<Vec<Hist>>>,
    pub sender_tids: Vec<i32>,
    pub receiver_tids: Vec<i32>,
    pub arrived: Arc<Vec<AtomicU64>>,
}

impl Crew {
    pub fn start(
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
    pub fn finish(&mut self) -> anyhow::Result<Vec<Vec<Hist>>> {
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

/// Bytes read at a time by a receiving connection.
const READ_BUF: usize = 2048;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Sender,
    Receiver,
}

/// What the threads tell the main thread.
pub enum Msg {
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

pub enum Cmd {
    Burst(u32),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_is_even() {
        let parts = split((0..10).collect::<Vec<_>>(), 3);
        let sizes: Vec<usize> = parts.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![4, 3, 3]);
        assert_eq!(parts.concat(), (0..10).collect::<Vec<_>>());
    }
}
