//! CPU stalls: windows in which a CPU ran nothing at all.
//!
//! On a virtual machine the host can stop one of the guest's vCPUs for tens of milliseconds.
//! From inside the guest that time is nearly invisible (`/proc/stat` steal shows little or none
//! of it), yet every task on that vCPU stops, and on a busy machine the backlog takes a second
//! or more to clear: the load generator would report slow joins that no server caused. So the
//! coordinator runs one probe thread per CPU it may use, pinned to that CPU, which sleeps
//! [`PERIOD`] at a time and records every wake-up that comes [`THRESHOLD`] or more late. A
//! thread that sleeps nearly all the time preempts whatever runs when it wakes (CFS favours
//! sleepers), so a wake-up that late means the CPU itself did not run — or the whole process was
//! stopped, which is how the tests exercise it. Cost: 500 short wake-ups a second per CPU.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::worker::now_ms;

/// How long a probe sleeps between checks.
pub const PERIOD: Duration = Duration::from_millis(2);
/// A wake-up this late (beyond [`PERIOD`]) is a stall.
pub const THRESHOLD: Duration = Duration::from_millis(20);
/// Stalls kept per CPU (memory bound for very long runs).
const MAX_PER_CPU: usize = 10_000;

/// One window in which a CPU ran nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stall {
    pub cpu: usize,
    /// Unix ms when the probe should have woken.
    pub at_ms: u64,
    /// How late it woke.
    pub ms: f64,
}

/// The running probe threads.
pub struct Probe {
    stop: Arc<AtomicBool>,
    /// One per CPU: the CPU and its thread (which returns `None` if it could not pin itself).
    threads: Vec<(usize, JoinHandle<Option<Vec<Stall>>>)>,
}

impl Drop for Probe {
    /// A probe dropped without [`Probe::finish`] (an early error) still stops its threads.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Probe {
    /// Starts one probe per CPU in this process' affinity mask.
    pub fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = cpus()
            .into_iter()
            .filter_map(|cpu| {
                let stop = stop.clone();
                std::thread::Builder::new()
                    .name(format!("stall-probe-{cpu}"))
                    .spawn(move || watch(cpu, &stop))
                    .ok()
                    .map(|t| (cpu, t))
            })
            .collect();
        Probe { stop, threads }
    }

    /// Stops the probes. Every stall seen, oldest first, and the CPUs that were watched.
    pub fn finish(mut self) -> (Vec<Stall>, Vec<usize>) {
        self.stop.store(true, Ordering::Relaxed);
        let mut watched = Vec::new();
        let mut all = Vec::new();
        for (cpu, t) in std::mem::take(&mut self.threads) {
            if let Ok(Some(stalls)) = t.join() {
                watched.push(cpu);
                all.extend(stalls);
            }
        }
        all.sort_by_key(|s| s.at_ms);
        (all, watched)
    }
}

/// The CPUs this process may run on.
fn cpus() -> Vec<usize> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Ok(set) = rustix::thread::sched_getaffinity(None) {
        return (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect();
    }
    (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
}

/// Pins the calling thread to `cpu`; false where that is not possible.
fn pin(cpu: usize) -> bool {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        rustix::thread::sched_setaffinity(None, &set).is_ok()
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = cpu;
        false
    }
}

fn watch(cpu: usize, stop: &AtomicBool) -> Option<Vec<Stall>> {
    if !pin(cpu) {
        return None;
    }
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let due_ms = now_ms() + PERIOD.as_millis() as u64;
        let t0 = Instant::now();
        std::thread::sleep(PERIOD);
        let late = t0.elapsed().saturating_sub(PERIOD);
        if late >= THRESHOLD && out.len() < MAX_PER_CPU {
            out.push(Stall {
                cpu,
                at_ms: due_ms,
                ms: crate::stats::round_to(late.as_secs_f64() * 1000.0, 1),
            });
        }
    }
    Some(out)
}
