//! The load generator's own CPU: what each event cost it, and whether it, rather than the
//! servers, was short of CPU during a run.
//!
//! Each worker is one process running one runtime thread, so a worker whose CPU time comes
//! close to the run's wall time had no CPU to spare: the latencies it measured include time
//! its own events waited for it. The report says so ([`LoadGenCpu::short_of_cpu`]) instead of
//! leaving a reader to blame the servers.

use serde::{Deserialize, Serialize};

/// Clock ticks per second of the CPU times in `/proc/<pid>/stat` (the kernel's `USER_HZ`,
/// which its ABI fixes at 100 on the architectures usher runs on).
const USER_HZ: f64 = 100.0;

/// A worker (one thread) that used at least this share of the run's wall time in CPU, or a
/// load generator that used this share of the cores it could run on, was short of CPU.
pub const SHORT_OF_CPU: f64 = 0.9;

/// CPU seconds (user and system) this process has used so far; `None` where `/proc` does not
/// say (not Linux).
pub fn own_cpu_s() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    stat_cpu_s(&text)
}

/// User plus system CPU seconds of one `/proc/<pid>/stat` line. The command name (field 2)
/// is in parentheses and may hold spaces or parentheses itself, so fields are counted after
/// the last `)`: utime and stime are fields 14 and 15 of the line.
pub fn stat_cpu_s(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (the state): field n is at index n - 3.
    let utime: u64 = fields.get(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.get(15 - 3)?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

/// One worker's CPU over its run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkerCpu {
    pub cpu_s: f64,
    pub wall_s: f64,
}

/// [`crate::report::Report::load_generator_cpu`]: the load generator's CPU over a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadGenCpu {
    /// CPU seconds used by the coordinator and every worker that reported it.
    pub cpu_s: f64,
    /// What it handled: joins sent plus events received (`waiting`, `admitted`, `closed`).
    pub events: u64,
    /// `cpu_s` per event, in µs (`None` without events).
    pub us_per_event: Option<f64>,
    /// The busiest worker's CPU as a share of its own wall time (a worker is one thread).
    pub busiest_worker: Option<f64>,
    /// The whole load generator's CPU as a share of what it could have used: its threads
    /// (workers plus the coordinator), at most the machine's cores, for the run's wall time.
    pub share_of_capacity: Option<f64>,
    /// Either share reached [`SHORT_OF_CPU`]: the load generator, not (only) the servers,
    /// was short of CPU, and the latencies include its own queueing.
    pub short_of_cpu: bool,
}

/// The load generator's CPU over a run of `wall_s` seconds on `cores` cores: the
/// coordinator's own CPU, each worker's, and the `events` they handled.
pub fn assess(
    coordinator_cpu_s: f64,
    workers: &[WorkerCpu],
    wall_s: f64,
    cores: usize,
    events: u64,
) -> LoadGenCpu {
    let cpu_s = coordinator_cpu_s + workers.iter().map(|w| w.cpu_s).sum::<f64>();
    let busiest_worker = workers
        .iter()
        .filter(|w| w.wall_s > 0.0)
        .map(|w| w.cpu_s / w.wall_s)
        .reduce(f64::max);
    let threads = (workers.len() + 1).min(cores.max(1));
    let share_of_capacity = (wall_s > 0.0).then(|| cpu_s / (threads as f64 * wall_s));
    let short_of_cpu = busiest_worker.is_some_and(|s| s >= SHORT_OF_CPU)
        || share_of_capacity.is_some_and(|s| s >= SHORT_OF_CPU);
    LoadGenCpu {
        cpu_s: round(cpu_s, 2),
        events,
        us_per_event: (events > 0).then(|| round(cpu_s * 1e6 / events as f64, 1)),
        busiest_worker: busiest_worker.map(|s| round(s, 3)),
        share_of_capacity: share_of_capacity.map(|s| round(s, 3)),
        short_of_cpu,
    }
}

fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

/// The report's line: `load gen cpu  …`, with a warning when it was short of CPU.
pub fn summary_line(c: &LoadGenCpu) -> String {
    let per_event = c.us_per_event.map_or_else(
        || "no events".to_owned(),
        |us| format!("{us:.1} µs per event"),
    );
    let share =
        |s: Option<f64>| s.map_or_else(|| "n/a".to_owned(), |s| format!("{:.0}%", s * 100.0));
    let mut line = format!(
        "load gen cpu {:.2} s, {} ({} events); busiest worker {} of a core, {} of its cores",
        c.cpu_s,
        per_event,
        c.events,
        share(c.busiest_worker),
        share(c.share_of_capacity)
    );
    if c.short_of_cpu {
        line.push_str(
            "\nwarning      the load generator was short of CPU: its latencies include its own \
             queueing, not only the servers' (use more --workers, or a machine of its own)",
        );
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_times_are_read_after_the_command_name() {
        // A command name with a space and a parenthesis; utime 250, stime 50 ticks.
        let line = "4242 (usher (load) gen) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 \
                    20 0 1 0 100 1000000 200 18446744073709551615";
        assert_eq!(stat_cpu_s(line), Some(3.0));
        assert_eq!(stat_cpu_s("4242 (x) S 1 2"), None, "a truncated line");
        assert!(own_cpu_s().is_some_and(|s| s >= 0.0));
    }

    #[test]
    fn cost_per_event_and_a_worker_short_of_cpu() {
        let w = |cpu_s, wall_s| WorkerCpu { cpu_s, wall_s };
        // Two workers at 50% and 95% of a core over 10 s, coordinator 0.5 s, 4 cores.
        let c = assess(0.5, &[w(5.0, 10.0), w(9.5, 10.0)], 10.0, 4, 300_000);
        assert_eq!(c.cpu_s, 15.0);
        assert_eq!(c.us_per_event, Some(50.0));
        assert_eq!(c.busiest_worker, Some(0.95));
        assert_eq!(c.share_of_capacity, Some(0.5), "3 threads × 10 s");
        assert!(c.short_of_cpu, "one worker had no CPU to spare");
        assert!(summary_line(&c).contains("short of CPU"));

        let calm = assess(0.5, &[w(5.0, 10.0), w(4.0, 10.0)], 10.0, 4, 300_000);
        assert!(!calm.short_of_cpu);
        assert!(!summary_line(&calm).contains("warning"));
    }

    #[test]
    fn on_fewer_cores_than_threads_the_cores_bound_the_capacity() {
        let w = |cpu_s| WorkerCpu {
            cpu_s,
            wall_s: 10.0,
        };
        // Four workers at 47% each on 2 cores: 18.8 + 0.2 = 19 s of 20 s the cores give.
        let c = assess(0.2, &[w(4.7), w(4.7), w(4.7), w(4.7)], 10.0, 2, 0);
        assert_eq!(c.share_of_capacity, Some(0.95));
        assert!(c.short_of_cpu);
        assert_eq!(c.us_per_event, None);
    }
}
