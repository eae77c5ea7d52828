//! What `usher-floor` prints: one JSON object on stdout, a short summary on stderr.

use serde_json::json;
use usher_loadgen::conn::now_us;
use usher_loadgen::stats::{round_to, Hist};

use crate::args::Args;
use crate::frames::chunk;
use crate::measure::{Measured, USER_HZ};

pub fn report(a: &Args, setup_ms: f64, source_ips: usize, m: &Measured, hists: &[Vec<Hist>]) {
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

fn ms(us: u64) -> f64 {
    round_to(us as f64 / 1000.0, 3)
}
