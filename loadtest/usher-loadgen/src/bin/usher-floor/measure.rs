//! Runs the bursts on schedule and measures them: when each burst's writes ended, and the CPU
//! the sending and receiving threads and the whole machine used over all of them.

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::bail;
use usher_loadgen::machine::MachineCpu;

use crate::args::Args;
use crate::crew::{Cmd, Crew, Msg};

/// What [`measure`] found, for [`crate::report`].
pub struct Measured {
    /// Per burst: the latest last write over the senders, µs after its t0.
    pub last_write_us: Vec<u64>,
    pub blocked: u64,
    pub sender_cpu_ns: Option<u64>,
    pub receiver_cpu_ns: Option<u64>,
    pub machine: Option<(MachineCpu, MachineCpu)>,
}

/// Runs every burst at its scheduled time and waits for all of its events (at most
/// `BURST_DEADLINE`); measures the threads' and the machine's CPU over all of them.
pub fn measure(a: &Args, crew: &Crew) -> anyhow::Result<Measured> {
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
                MachineCpu::read(),
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
        MachineCpu::read(),
    );
    m.sender_cpu_ns = before.0.zip(after.0).map(|(b, a)| a.saturating_sub(b));
    m.receiver_cpu_ns = before.1.zip(after.1).map(|(b, a)| a.saturating_sub(b));
    m.machine = before.2.zip(after.2);
    Ok(m)
}

/// How long every event of a burst has to arrive, from the burst's start.
const BURST_DEADLINE: Duration = Duration::from_secs(5);
/// `/proc/stat` counts in USER_HZ ticks, 100 per second on Linux.
pub const USER_HZ: u64 = 100;

/// Some event had not arrived by the deadline (exit status 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Missing(String);

/// On-CPU time of one thread of this process in ns (user + system, including the softirq
/// work done in its context), from `/proc/self/task/<tid>/schedstat`.
fn thread_cpu_ns(tid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

fn threads_cpu_ns(tids: &[i32]) -> Option<u64> {
    tids.iter().map(|&t| thread_cpu_ns(t)).sum()
}
