//! What workers tell the coordinator: one JSON object per line on their stdout.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Connection counters of one worker (or, merged, of the whole run).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Connections started (first request sent or attempted).
    pub started: u64,
    /// Streams open right now (a `200` response being read).
    pub connected: u64,
    /// Connections holding a place and not yet admitted, closed or failed (connected or
    /// between reconnects).
    pub waiting: u64,
    /// Connections that received their first `waiting` event.
    pub joined: u64,
    /// Connections that received `admitted`.
    pub admitted: u64,
    /// Connections that received `closed`.
    pub closed: u64,
    /// Connections that gave up (non-200 answer, wrong content type, unparsable event).
    pub failed: u64,
    /// Connections that left the line (`--leave-per-minute`, `crate::leaving`).
    #[serde(default)]
    pub left: u64,
    /// Errors of every kind (see the report's `errors` map).
    pub errors: u64,
    /// New requests after the first one of a connection.
    pub reconnects: u64,
    /// `200` streams that ended without a single event (gateway at its cap, draining, or
    /// Redis away: the gateway answers a bare `retry:`).
    pub empty_streams: u64,
    /// `waiting` events received (first ones included).
    pub waiting_events: u64,
    /// Joins slower than [`SLOW_JOIN_MS`]: the timeline shows when they happened.
    pub slow_joins: u64,
    /// `challenge` events received (a proof-of-work queue refused a join).
    #[serde(default)]
    pub challenges: u64,
    /// SHA-256 hashes computed to solve them.
    #[serde(default)]
    pub pow_hashes: u64,
}

/// The join latency target (BENCHMARKS.md): joins slower than this are counted per second.
pub const SLOW_JOIN_MS: u64 = 20;

/// `span` widened to include `[first, last]` (times in µs; `None` is empty).
pub fn widen(span: Option<(u64, u64)>, first: u64, last: u64) -> Option<(u64, u64)> {
    Some(span.map_or((first, last), |(a, b)| (a.min(first), b.max(last))))
}

impl Counters {
    pub fn add(&mut self, o: &Counters) {
        self.started += o.started;
        self.connected += o.connected;
        self.waiting += o.waiting;
        self.joined += o.joined;
        self.admitted += o.admitted;
        self.closed += o.closed;
        self.failed += o.failed;
        self.left += o.left;
        self.errors += o.errors;
        self.reconnects += o.reconnects;
        self.empty_streams += o.empty_streams;
        self.waiting_events += o.waiting_events;
        self.slow_joins += o.slow_joins;
        self.challenges += o.challenges;
        self.pow_hashes += o.pow_hashes;
    }

    /// Connections in a final state.
    pub fn finished(&self) -> u64 {
        self.admitted + self.closed + self.failed + self.left
    }
}

/// One admission seen: `[place, admitted_at (ms since the epoch), token fingerprint,
/// latency (µs from admitted_at to receipt)]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmissionRecord(pub u64, pub u64, pub u64, pub u64);

impl AdmissionRecord {
    pub fn place(&self) -> u64 {
        self.0
    }
    pub fn admitted_at_ms(&self) -> u64 {
        self.1
    }
    pub fn token(&self) -> u64 {
        self.2
    }
    pub fn latency_us(&self) -> u64 {
        self.3
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WorkerResult {
    pub worker: u32,
    pub pid: u32,
    /// Connections this worker was to open.
    pub assigned: u64,
    pub elapsed_ms: u64,
    pub counters: Counters,
    /// Error counts by kind (`connect`, `connect_timeout`, `io`, `idle_timeout`, `parse`,
    /// `content_type`, `status_<code>`, ...).
    pub errors: BTreeMap<String, u64>,
    /// `closed` events by reason.
    pub closed_reasons: BTreeMap<String, u64>,
    /// Histogram buckets `[µs, count]`.
    pub join: Vec<(u64, u64)>,
    pub position_update: Vec<(u64, u64)>,
    pub admission: Vec<(u64, u64)>,
    pub admissions: Vec<AdmissionRecord>,
    /// When this worker's first and last joins completed (first `waiting` received), µs since
    /// the epoch; `None` without joins.
    #[serde(default)]
    pub join_span_us: Option<(u64, u64)>,
    /// Each admitted connection's arrival and admission (`crate::waits`).
    #[serde(default)]
    pub waits: Vec<crate::waits::WaitRecord>,
    /// CPU seconds this worker process used (`crate::cpu`); `None` where `/proc` does not say.
    #[serde(default)]
    pub cpu_s: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WorkerMsg {
    Progress {
        worker: u32,
        elapsed_ms: u64,
        counters: Counters,
    },
    Done(Box<WorkerResult>),
}
