//! What a worker's connections record: counters (atomics) and samples (latency histograms,
//! admissions, errors by kind) under one mutex held for a few instructions, and the
//! [`WorkerResult`] made of them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;

use crate::proto::{AdmissionRecord, Counters, WorkerResult};
use crate::stats::Hist;

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
    pub(crate) started: AtomicU64,
    pub(crate) connected: AtomicU64,
    pub(crate) waiting: AtomicU64,
    pub(crate) joined: AtomicU64,
    pub(crate) admitted: AtomicU64,
    pub(crate) closed: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) left: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) reconnects: AtomicU64,
    pub(crate) empty_streams: AtomicU64,
    pub(crate) waiting_events: AtomicU64,
    pub(crate) slow_joins: AtomicU64,
    pub(crate) challenges: AtomicU64,
    pub(crate) pow_hashes: AtomicU64,
    /// Connections in a final state; `all_finished` fires when it reaches `assigned`.
    pub(crate) finished: AtomicU64,
    assigned: u64,
    pub all_finished: Notify,
    samples: Mutex<Samples>,
}

#[derive(Default)]
pub(crate) struct Samples {
    pub(crate) join: Hist,
    pub(crate) position_update: Hist,
    pub(crate) admission: Hist,
    pub(crate) errors: BTreeMap<String, u64>,
    pub(crate) closed_reasons: BTreeMap<String, u64>,
    pub(crate) admissions: Vec<AdmissionRecord>,
    /// Arrival and admission of each admitted connection (`crate::waits`).
    pub(crate) waits: Vec<crate::waits::WaitRecord>,
    /// First and last join completion, µs since the epoch.
    pub(crate) join_span_us: Option<(u64, u64)>,
}

pub(crate) fn inc(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

impl Recorder {
    pub fn new(assigned: u64) -> Self {
        Self {
            assigned,
            ..Self::default()
        }
    }

    pub(crate) fn samples(&self) -> std::sync::MutexGuard<'_, Samples> {
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

    pub(crate) fn finish(&self) {
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
