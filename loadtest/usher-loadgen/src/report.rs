//! The merged result of a run: the JSON report and the summary table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::checks::{self, Checks};
use crate::cpu::{LoadGenCpu, WorkerCpu};
use crate::plan::Plan;
use crate::proto::{AdmissionRecord, Counters, WorkerResult};
use crate::stalls::Stall;
use crate::stats::{round_to, Hist, LatencySummary};

/// Exit status when a duplicate admission or a FIFO violation was seen.
pub const EXIT_VIOLATION: i32 = 3;
/// Exit status when `--until-admitted` was given and some connection was never admitted.
pub const EXIT_MISSING: i32 = 4;
/// Exit status when a worker ended without a result.
pub const EXIT_WORKER_LOST: i32 = 1;

/// One second of the run, summed over the workers' latest progress reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimelinePoint {
    /// Seconds since the start of the run.
    pub t: f64,
    pub started: u64,
    pub connected: u64,
    pub waiting: u64,
    pub joined: u64,
    pub admitted: u64,
    pub errors: u64,
    pub reconnects: u64,
    /// Joins slower than the target so far (`proto::SLOW_JOIN_MS`).
    pub slow_joins: u64,
    /// The share of all the machine's CPUs that was busy since the previous point (every
    /// process: `crate::machine`); absent where `/proc/stat` does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_busy: Option<f64>,
    /// The seconds `machine_busy` covers, as measured (not the difference of two `t`s, which
    /// are rounded, and a run's first and last spans are not a second long).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_busy_secs: Option<f64>,
}

impl TimelinePoint {
    /// How busy the machine was since the point before, and over how long.
    pub fn machine_span(&self) -> Option<crate::machine::BusySpan> {
        Some(crate::machine::BusySpan {
            busy: self.machine_busy?,
            secs: self.machine_busy_secs?,
        })
    }

    /// This point with the machine's busy `span` since the point before.
    pub fn with_machine(self, span: Option<crate::machine::BusySpan>) -> Self {
        Self {
            machine_busy: span.map(|s| s.busy),
            machine_busy_secs: span.map(|s| s.secs),
            ..self
        }
    }

    pub fn new(t: f64, c: &Counters) -> Self {
        Self {
            t,
            started: c.started,
            connected: c.connected,
            waiting: c.waiting,
            joined: c.joined,
            admitted: c.admitted,
            errors: c.errors,
            reconnects: c.reconnects,
            slow_joins: c.slow_joins,
            machine_busy: None,
            machine_busy_secs: None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct WorkerInfo {
    pub index: u32,
    pub pid: Option<u32>,
    pub assigned: u64,
    /// It sent its result.
    pub reported: bool,
    pub exit_status: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    pub connections: u64,
    pub started: u64,
    pub never_started: u64,
    pub joined: u64,
    pub admitted: u64,
    pub closed: u64,
    pub failed: u64,
    /// Left the line (`--leave-per-minute`).
    pub left: u64,
    /// Holding a place but not admitted when the run ended.
    pub still_waiting: u64,
    /// Streams open when the run ended.
    pub still_connected: u64,
    pub reconnects: u64,
    pub empty_streams: u64,
    pub waiting_events: u64,
    /// Joins slower than the target (`proto::SLOW_JOIN_MS`).
    pub slow_joins: u64,
    /// Proof of work: `challenge` events received, and hashes computed to solve them.
    pub challenges: u64,
    pub pow_hashes: u64,
    /// Joins completed per second between the first and the last join's completion:
    /// `(joined - 1) / (last - first)`; `None` with fewer than two joins.
    pub join_rate_per_s: Option<f64>,
    pub errors: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Latencies {
    /// Request start (first attempt) → first `waiting` event.
    pub join: LatencySummary,
    /// Receipt of each later `waiting` event − its `as_of_ms`.
    pub position_update: LatencySummary,
    /// Receipt of `admitted` − its `admitted_at`.
    pub admission: LatencySummary,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Distributions {
    /// `[quantile, ms]` pairs.
    pub join: Vec<(f64, f64)>,
    pub position_update: Vec<(f64, f64)>,
    pub admission: Vec<(f64, f64)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Correctness {
    #[serde(flatten)]
    pub checks: Checks,
    /// With --until-admitted: connections never admitted (else null).
    pub missing_admissions: Option<u64>,
    pub ok: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub tool: String,
    pub version: String,
    /// The command line, shell-quoted.
    pub command_line: String,
    pub argv: Vec<String>,
    /// `USHER_LOADGEN_*` variables set for the run (flags given that way).
    pub environment: BTreeMap<String, String>,
    /// RFC 3339: when the first connection was scheduled.
    pub started_at: String,
    pub started_at_ms: u64,
    pub elapsed_s: f64,
    pub config: Plan,
    pub workers: Vec<WorkerInfo>,
    pub totals: Totals,
    /// Errors by kind: `connect`, `connect_timeout`, `bind`, `socket`, `io`,
    /// `eof_before_head`, `idle_timeout`, `truncated`, `parse`, `content_type`, `status_<code>`.
    pub errors: BTreeMap<String, u64>,
    pub closed_reasons: BTreeMap<String, u64>,
    pub latency_ms: Latencies,
    pub distributions_ms: Distributions,
    pub correctness: Correctness,
    /// Admission latency by admission time (one row per dispatcher tick; the first 300).
    pub admission_by_tick: Vec<TickLatency>,
    /// Windows in which a CPU of this machine ran nothing (see `stalls`): on a virtual machine,
    /// the host stopping a vCPU. Slow joins or admissions during one are not the servers' doing.
    pub cpu_stalls: CpuStalls,
    /// Each admitted browser's wait from its arrival, and when the line emptied
    /// (`crate::waits`): what `make bench` compares a rehearsal with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait: Option<crate::waits::WaitSummary>,
    /// What the run cost the load generator itself, and whether it was short of CPU.
    pub load_generator_cpu: LoadGenCpu,
    /// How busy the whole machine's CPUs were, every process counted, over the seconds in
    /// which joins were answered (`crate::machine::busy_while_growing`): near 1, every event
    /// queued behind others, the servers' and the load generator's alike.
    pub machine_busy_while_joining: Option<f64>,
    /// The same over the hold, the seconds in which no join was answered and browsers were
    /// held (`crate::machine::busy_while_holding`): when a held line's position updates are
    /// measured. At [`crate::cpu::SHORT_OF_CPU`] or more the machine, not one process, was
    /// short of CPU, and the report says so.
    pub machine_busy_while_holding: Option<f64>,
    pub timeline: Vec<TimelinePoint>,
    pub exit_code: i32,
}

/// Admission latency of the places admitted at one time (one tick).
#[derive(Debug, Clone, Serialize)]
pub struct TickLatency {
    pub admitted_at_ms: u64,
    #[serde(flatten)]
    pub latency: LatencySummary,
}

/// [`Report::cpu_stalls`].
#[derive(Debug, Clone, Serialize)]
pub struct CpuStalls {
    /// A probe wake-up this late is a stall.
    pub threshold_ms: f64,
    /// CPUs watched (one pinned probe thread each); 0 where CPUs cannot be pinned.
    pub cpus_watched: usize,
    /// Their numbers.
    pub cpus: Vec<usize>,
    pub count: usize,
    pub total_ms: f64,
    pub longest_ms: Option<f64>,
    /// The stalls (the first 1,000; at most 10,000 per CPU are counted): seconds since the
    /// start of the run (negative: while the workers were starting), CPU, length.
    pub stalls: Vec<StallRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StallRow {
    pub t_s: f64,
    pub cpu: usize,
    pub ms: f64,
}

impl CpuStalls {
    pub fn new(stalls: &[Stall], cpus: Vec<usize>, started_at_ms: u64) -> Self {
        let total: f64 = stalls.iter().map(|s| s.ms).sum();
        CpuStalls {
            threshold_ms: crate::stalls::THRESHOLD.as_secs_f64() * 1000.0,
            cpus_watched: cpus.len(),
            cpus,
            count: stalls.len(),
            total_ms: round_to(total, 1),
            longest_ms: stalls.iter().map(|s| s.ms).reduce(f64::max),
            stalls: stalls
                .iter()
                .take(1000)
                .map(|s| StallRow {
                    t_s: (s.at_ms as f64 - started_at_ms as f64) / 1000.0,
                    cpu: s.cpu,
                    ms: s.ms,
                })
                .collect(),
        }
    }
}

/// Rows of [`Report::admission_by_tick`].
fn by_tick(admissions: &[AdmissionRecord]) -> Vec<TickLatency> {
    let mut groups: BTreeMap<u64, Hist> = BTreeMap::new();
    for a in admissions {
        groups
            .entry(a.admitted_at_ms())
            .or_default()
            .record_us(a.latency_us());
    }
    groups
        .into_iter()
        .take(300)
        .map(|(admitted_at_ms, h)| TickLatency {
            admitted_at_ms,
            latency: h.summary(),
        })
        .collect()
}

/// Shell-quotes one argument (for the report's `command_line`).
pub fn shell_quote(a: &str) -> String {
    if !a.is_empty()
        && a.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:,=@+%".contains(&b))
    {
        a.to_owned()
    } else {
        format!("'{}'", a.replace('\'', r"'\''"))
    }
}

pub struct RunInfo {
    pub argv: Vec<String>,
    pub started_at_ms: u64,
    pub elapsed_s: f64,
    pub workers: Vec<WorkerInfo>,
    pub timeline: Vec<TimelinePoint>,
    pub stalls: Vec<Stall>,
    /// The CPUs the stall probe watched.
    pub stall_cpus: Vec<usize>,
    /// CPU seconds the coordinator used (`None` where `/proc` does not say).
    pub coordinator_cpu_s: Option<f64>,
}

pub fn build(plan: &Plan, run: RunInfo, results: &[WorkerResult]) -> Report {
    let mut c = Counters::default();
    let mut errors = BTreeMap::new();
    let mut closed_reasons = BTreeMap::new();
    let (mut join, mut pos, mut adm) = (Hist::new(), Hist::new(), Hist::new());
    let mut admissions = Vec::new();
    let mut waits = Vec::new();
    let mut join_span: Option<(u64, u64)> = None;
    for r in results {
        c.add(&r.counters);
        if let Some((a, b)) = r.join_span_us {
            join_span = crate::proto::widen(join_span, a, b);
        }
        for (k, v) in &r.errors {
            *errors.entry(k.clone()).or_insert(0) += v;
        }
        for (k, v) in &r.closed_reasons {
            *closed_reasons.entry(k.clone()).or_insert(0) += v;
        }
        join.add_buckets(&r.join);
        pos.add_buckets(&r.position_update);
        adm.add_buckets(&r.admission);
        admissions.extend_from_slice(&r.admissions);
        waits.extend_from_slice(&r.waits);
    }
    let checks = checks::check(&admissions);
    let unique_admitted = {
        let mut places: Vec<u64> = admissions.iter().map(|a| a.place()).collect();
        places.sort_unstable();
        places.dedup();
        places.len() as u64
    };
    let missing = plan
        .until_admitted
        .then(|| plan.connections.saturating_sub(unique_admitted + c.left));
    let violation = checks.duplicate_admissions > 0 || checks.fifo_violations > 0;
    let lost = run.workers.iter().any(|w| !w.reported);
    let exit_code = if violation {
        EXIT_VIOLATION
    } else if missing.is_some_and(|m| m > 0) {
        EXIT_MISSING
    } else if lost {
        EXIT_WORKER_LOST
    } else {
        0
    };
    let started_at = usher_core::time::rfc3339_ms(run.started_at_ms);
    let load_generator_cpu = crate::cpu::assess(
        run.coordinator_cpu_s.unwrap_or(0.0),
        &results
            .iter()
            .filter_map(|r| {
                r.cpu_s.map(|cpu_s| WorkerCpu {
                    cpu_s,
                    wall_s: r.elapsed_ms as f64 / 1000.0,
                })
            })
            .collect::<Vec<_>>(),
        run.elapsed_s,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        c.joined + c.waiting_events + c.admitted + c.closed,
    );
    Report {
        tool: "usher-loadgen".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        command_line: run
            .argv
            .iter()
            .map(|a| shell_quote(a))
            .collect::<Vec<_>>()
            .join(" "),
        argv: run.argv,
        environment: std::env::vars()
            .filter(|(k, _)| k.starts_with("USHER_LOADGEN_"))
            .collect(),
        started_at,
        started_at_ms: run.started_at_ms,
        elapsed_s: round_to(run.elapsed_s, 3),
        config: plan.clone(),
        workers: run.workers,
        totals: Totals {
            connections: plan.connections,
            started: c.started,
            never_started: plan.connections.saturating_sub(c.started),
            joined: c.joined,
            admitted: c.admitted,
            closed: c.closed,
            failed: c.failed,
            left: c.left,
            still_waiting: c.waiting,
            still_connected: c.connected,
            reconnects: c.reconnects,
            empty_streams: c.empty_streams,
            waiting_events: c.waiting_events,
            slow_joins: c.slow_joins,
            challenges: c.challenges,
            pow_hashes: c.pow_hashes,
            join_rate_per_s: join_span.and_then(|(a, b)| {
                (c.joined >= 2 && b > a)
                    .then(|| round_to((c.joined - 1) as f64 * 1e6 / (b - a) as f64, 1))
            }),
            errors: c.errors,
        },
        errors,
        closed_reasons,
        latency_ms: Latencies {
            join: join.summary(),
            position_update: pos.summary(),
            admission: adm.summary(),
        },
        distributions_ms: Distributions {
            join: join.distribution(),
            position_update: pos.distribution(),
            admission: adm.distribution(),
        },
        correctness: Correctness {
            checks,
            missing_admissions: missing,
            ok: !violation && missing.unwrap_or(0) == 0,
        },
        admission_by_tick: by_tick(&admissions),
        cpu_stalls: CpuStalls::new(&run.stalls, run.stall_cpus, run.started_at_ms),
        wait: crate::waits::summarize(&waits, run.started_at_ms),
        load_generator_cpu,
        machine_busy_while_joining: crate::machine::busy_while_growing(
            run.timeline.iter().map(|p| (p.joined, p.machine_span())),
        )
        .map(|b| round_to(b, 3)),
        machine_busy_while_holding: crate::machine::busy_while_holding(
            run.timeline
                .iter()
                .map(|p| (p.joined, p.waiting, p.machine_span())),
        )
        .map(|b| round_to(b, 3)),
        timeline: run.timeline,
        exit_code,
    }
}

fn fmt_ms(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// The human summary printed on stdout at the end.
pub fn summary(r: &Report) -> String {
    let mut s = String::new();
    let p = &r.config;
    let t = &r.totals;
    let _ = writeln!(
        s,
        "usher-loadgen: queue {} — {} connections, {} worker(s), {} gateway(s), {}, {:.1} s",
        p.queue,
        p.connections,
        p.workers,
        p.gateways.len(),
        match p.source_ips.len() {
            0 => "source address chosen by the OS".to_owned(),
            n => format!("{n} source IP(s)"),
        },
        r.elapsed_s
    );
    let _ = writeln!(
        s,
        "\n{:<17}{:>9}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "latency (ms)", "count", "p50", "p90", "p99", "p99.9", "max"
    );
    for (name, l) in [
        ("join", &r.latency_ms.join),
        ("position update", &r.latency_ms.position_update),
        ("admission", &r.latency_ms.admission),
    ] {
        let _ = writeln!(
            s,
            "{:<17}{:>9}{:>10}{:>10}{:>10}{:>10}{:>10}",
            name,
            l.count,
            fmt_ms(l.p50_ms),
            fmt_ms(l.p90_ms),
            fmt_ms(l.p99_ms),
            fmt_ms(l.p999_ms),
            fmt_ms(l.max_ms)
        );
    }
    let _ = writeln!(
        s,
        "\nconnections  started {}  joined {}  admitted {}  closed {}  failed {}  still waiting {}  never started {}",
        t.started, t.joined, t.admitted, t.closed, t.failed, t.still_waiting, t.never_started
    );
    if let Some(rate) = t.join_rate_per_s {
        let _ = writeln!(s, "join rate    {rate:.0}/s (first to last join)");
    }
    let _ = writeln!(
        s,
        "streams      reconnects {}  empty streams {}  waiting events {}  joins over {} ms {}",
        t.reconnects,
        t.empty_streams,
        t.waiting_events,
        crate::proto::SLOW_JOIN_MS,
        t.slow_joins
    );
    if t.challenges > 0 {
        let _ = writeln!(
            s,
            "proof of work  challenges {}  hashes {}",
            t.challenges, t.pow_hashes
        );
    }
    let cs = &r.cpu_stalls;
    let stalls = match cs.longest_ms {
        None if cs.cpus_watched == 0 => "not probed (no CPU could be pinned)".to_owned(),
        None => format!("none over {:.0} ms on {} CPUs", cs.threshold_ms, cs.cpus_watched),
        Some(longest) => format!(
            "{} over {:.0} ms on {} CPUs (longest {:.0} ms, {:.0} ms in all): results in them are not the servers' doing",
            cs.count, cs.threshold_ms, cs.cpus_watched, longest, cs.total_ms
        ),
    };
    let _ = writeln!(s, "cpu stalls   {stalls}");
    let _ = writeln!(s, "{}", crate::cpu::summary_line(&r.load_generator_cpu));
    s.push_str(&crate::machine::summary_lines(
        r.machine_busy_while_joining,
        r.machine_busy_while_holding,
    ));
    let errors = if r.errors.is_empty() {
        "none".to_owned()
    } else {
        r.errors
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(s, "errors       {errors}");
    if !r.closed_reasons.is_empty() {
        let closed = r
            .closed_reasons
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(s, "closed       {closed}");
    }
    let c = &r.correctness;
    let missing = c
        .missing_admissions
        .map_or_else(|| "n/a".to_owned(), |m| m.to_string());
    let _ = writeln!(
        s,
        "correctness  duplicates {}  FIFO violations {}  missing {}  => {}",
        c.checks.duplicate_admissions,
        c.checks.fifo_violations,
        missing,
        if c.ok { "OK" } else { "FAILED" }
    );
    if t.joined == 0 {
        let _ = writeln!(
            s,
            "warning      no connection got a place (see errors; is the queue open and the gateway up?)"
        );
    }
    for w in r.workers.iter().filter(|w| !w.reported) {
        let _ = writeln!(
            s,
            "warning      worker {} sent no result ({})",
            w.index,
            w.exit_status.as_deref().unwrap_or("still running")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("--queue"), "--queue");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
