//! The whole machine's CPU, from `/proc/stat`: how busy all its CPUs were over a span, every
//! process counted (the servers, Redis, the load generator itself).
//!
//! On a machine the servers share with the load generator, this is what a latency ratio
//! hides: a run whose machine was nearly all busy queues every event behind others, and its
//! tail grows with that, whatever each process does ([`crate::report::Report`]'s
//! `machine_busy_while_joining`, `machine_busy_while_holding` and the timeline's
//! `machine_busy` say how busy; [`summary_lines`] warns when it had no CPU to spare).

/// All CPUs' time so far, in the kernel's ticks (USER_HZ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineCpu {
    /// Running anything: user, nice, system, irq and softirq time.
    pub busy: u64,
    /// Running nothing: idle and iowait time.
    pub idle: u64,
    /// Softirq time alone (part of `busy`): the kernel's network work, on loopback.
    pub softirq: u64,
    /// Time the hypervisor ran something else on these CPUs (in neither `busy` nor `idle`).
    pub steal: u64,
}

impl MachineCpu {
    /// The machine's CPU time now; `None` where `/proc/stat` does not say (not Linux).
    pub fn read() -> Option<Self> {
        Self::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// The aggregate `cpu ` line of a `/proc/stat` text: user nice system idle iowait irq
    /// softirq steal ...
    pub fn parse(stat: &str) -> Option<Self> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        let at = |i: usize| v.get(i).copied();
        Some(Self {
            busy: at(0)? + at(1)? + at(2)? + at(5)? + at(6)?,
            idle: at(3)? + at(4)?,
            softirq: at(6)?,
            steal: at(7)?,
        })
    }

    /// The share of the CPUs' time that was busy between `earlier` and `self` (0 to 1; time
    /// stolen by the hypervisor counts neither way); `None` when no time passed.
    pub fn busy_since(&self, earlier: &Self) -> Option<f64> {
        let busy = self.busy.saturating_sub(earlier.busy);
        let all = busy + self.idle.saturating_sub(earlier.idle);
        (all > 0).then(|| busy as f64 / all as f64)
    }
}

/// Reads the machine's CPU at each [`BusySampler::sample`] and says how busy it was since the
/// sample before (the first since [`BusySampler::start`]), and over how long.
pub struct BusySampler {
    last: Option<MachineCpu>,
    last_at: std::time::Instant,
}

/// How busy the machine was over one span of a run's timeline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BusySpan {
    /// The busy share (0 to 1), to three decimals.
    pub busy: f64,
    /// The span's length in seconds, as measured (the timeline's `t` labels are rounded
    /// seconds, and a run's first and last spans are not a second long).
    pub secs: f64,
}

impl BusySampler {
    pub fn start() -> Self {
        Self {
            last: MachineCpu::read(),
            last_at: std::time::Instant::now(),
        }
    }

    /// The busy share since the previous sample, and how long ago that was.
    pub fn sample(&mut self) -> Option<BusySpan> {
        let now = MachineCpu::read();
        let at = std::time::Instant::now();
        let busy = now
            .zip(self.last)
            .and_then(|(now, before)| now.busy_since(&before));
        let secs = at.duration_since(self.last_at).as_secs_f64();
        self.last = now;
        self.last_at = at;
        busy.map(|b| BusySpan {
            busy: crate::stats::round_to(b, 3),
            secs: crate::stats::round_to(secs, 3),
        })
    }
}

/// The mean busy share of the spans in which a cumulative count grew, weighted by their
/// measured length: `points` are a run's timeline, each (the count so far, the machine's busy
/// share since the point before and over how long), in order. With the count of joins
/// answered, the seconds of a run's join phase, not the hold after it (a run's first point
/// also covers its workers' start). Weighted as [`busy_while_holding`] is: a run's last span
/// may be a few milliseconds, and counted alike it would weigh as much as a whole second of
/// joins. `None` when no such span has a share.
pub fn busy_while_growing(
    points: impl IntoIterator<Item = (u64, Option<BusySpan>)>,
) -> Option<f64> {
    let mut before = 0;
    weighted_busy(points.into_iter().map(|(count, span)| {
        let grew = count > before;
        before = before.max(count);
        (grew, span)
    }))
}

/// The mean busy share of the hold: the spans in which no join was answered while browsers
/// were held (waiting), weighted by their measured length (a run's last span may be a few
/// milliseconds). `points` are a run's timeline, each (joins answered so far, browsers
/// waiting, the busy share since the point before and over how long), in order. The position
/// updates of a held line are measured then: near 1, they queued for a core, whoever (servers
/// or load generator) asked for it. `None` when no such span has a share.
pub fn busy_while_holding(
    points: impl IntoIterator<Item = (u64, u64, Option<BusySpan>)>,
) -> Option<f64> {
    let mut before = 0;
    weighted_busy(points.into_iter().map(|(joined, waiting, span)| {
        let holding = joined <= before && waiting > 0;
        before = before.max(joined);
        (holding, span)
    }))
}

/// The mean busy share of the spans marked `true`, weighted by their length.
fn weighted_busy(spans: impl IntoIterator<Item = (bool, Option<BusySpan>)>) -> Option<f64> {
    let (mut sum, mut secs) = (0.0, 0.0);
    for (counts, span) in spans {
        if let (true, Some(s)) = (counts, span) {
            sum += s.busy * s.secs;
            secs += s.secs;
        }
    }
    (secs > 0.0).then(|| sum / secs)
}

/// The report's `machine` line (how busy the machine was while joins were answered, and
/// while the line was held), and a warning when either share reached
/// [`crate::cpu::SHORT_OF_CPU`]: then every latency includes waiting for a core, and neither
/// the servers nor the load generator alone explain it. Empty when nothing was measured.
pub fn summary_lines(joining: Option<f64>, holding: Option<f64>) -> String {
    let pct = |b: f64| format!("{:.0}%", b * 100.0);
    let spans: Vec<String> = [
        joining.map(|b| format!("{} while joins were answered", pct(b))),
        holding.map(|b| format!("{} while the line was held", pct(b))),
    ]
    .into_iter()
    .flatten()
    .collect();
    if spans.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "machine      all CPUs busy {} (every process, /proc/stat)\n",
        spans.join(", ")
    );
    let short = [joining, holding]
        .into_iter()
        .flatten()
        .any(|b| b >= crate::cpu::SHORT_OF_CPU);
    if short {
        s.push_str(
            "warning      the machine was short of CPU: every latency includes waiting for a \
             core, the servers' and the load generator's alike (fewer browsers, or the load \
             generator on a machine of its own)\n",
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_while_growing_weighs_the_spans_with_new_counts() {
        let at = |busy: f64, secs: f64| Some(BusySpan { busy, secs });
        let points = [
            (0, at(0.10, 1.75)),  // start-up: nothing joined yet
            (500, at(0.80, 1.0)), // joins
            (900, at(0.90, 1.0)), // joins
            (900, at(0.20, 1.0)), // the hold: none
            (950, None),          // joins, but no reading
            (1000, at(0.60, 1.0)),
            (1010, at(0.0, 0.01)), // the last few joins, a moment later
        ];
        let b = busy_while_growing(points).expect("four spans");
        let want = (0.80 + 0.90 + 0.60 + 0.0 * 0.01) / 3.01;
        assert!((b - want).abs() < 1e-9, "{b} vs {want}");
        assert_eq!(
            busy_while_growing([(0, at(0.5, 1.0)), (0, at(0.5, 1.0))]),
            None
        );
        assert_eq!(busy_while_growing([(10, at(0.5, 0.0))]), None, "no time");
        assert_eq!(busy_while_growing([]), None);
    }

    #[test]
    fn busy_while_holding_weighs_the_spans_without_new_joins_and_with_browsers_held() {
        let at = |busy: f64, secs: f64| Some(BusySpan { busy, secs });
        let points = [
            (0, 0, at(0.10, 1.7)),       // start-up: nobody held yet
            (500, 500, at(0.80, 1.0)),   // joins
            (1000, 1000, at(0.70, 1.0)), // joins
            (1000, 1000, at(0.95, 1.0)), // the hold
            (1000, 990, None),           // the hold, no reading
            (1000, 980, at(1.0, 1.4)),   // the hold, the line moving, a tick run late
            (1000, 975, at(0.0, 0.01)),  // the run's end, a moment after
            (1000, 0, at(0.05, 1.0)),    // everyone admitted or gone
        ];
        let b = busy_while_holding(points).expect("three spans");
        let want = (0.95 * 1.0 + 1.0 * 1.4 + 0.0 * 0.01) / 2.41;
        assert!((b - want).abs() < 1e-9, "{b} vs {want}");
        assert_eq!(
            busy_while_holding([(10, 10, at(0.5, 1.0)), (20, 20, at(0.5, 1.0))]),
            None,
            "joins all along: no hold"
        );
    }

    /// A sample says how long its span was, as measured.
    #[test]
    fn a_sample_measures_its_span() {
        let mut m = BusySampler::start();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let s = m.sample().expect("Linux's /proc/stat");
        assert!((0.0..=1.0).contains(&s.busy), "{s:?}");
        assert!(s.secs >= 0.03 && s.secs < 5.0, "{s:?}");
    }

    #[test]
    fn a_machine_short_of_cpu_is_named_as_such() {
        assert_eq!(summary_lines(None, None), "");
        let calm = summary_lines(Some(0.65), Some(0.7));
        assert_eq!(
            calm,
            "machine      all CPUs busy 65% while joins were answered, 70% while the line was \
             held (every process, /proc/stat)\n"
        );
        let short = summary_lines(Some(0.65), Some(1.0));
        assert!(short.starts_with("machine      all CPUs busy 65% while joins were answered, 100% while the line was held"), "{short}");
        assert!(
            short.contains("\nwarning      the machine was short of CPU"),
            "{short}"
        );
        assert!(
            summary_lines(Some(0.95), None).contains("warning"),
            "joining counts too"
        );
    }

    #[test]
    fn the_aggregate_line_is_read_and_steal_counts_neither_way() {
        let stat = "cpu  100 5 40 800 10 2 3 50 0 0\ncpu0 50 2 20 400 5 1 1 25 0 0\nintr 1\n";
        let a = MachineCpu::parse(stat).expect("a cpu line");
        assert_eq!(
            a,
            MachineCpu {
                busy: 100 + 5 + 40 + 2 + 3,
                idle: 800 + 10,
                softirq: 3,
                steal: 50,
            }
        );
        // 150 ticks later: 120 busy, 30 idle, and 70 stolen.
        let b = MachineCpu {
            busy: a.busy + 120,
            idle: a.idle + 30,
            softirq: a.softirq,
            steal: a.steal + 70,
        };
        assert_eq!(b.busy_since(&a), Some(0.8));
        assert_eq!(a.busy_since(&a), None, "no time passed");
        assert_eq!(MachineCpu::parse("cpu0 1 2 3\n"), None, "no aggregate line");
        assert_eq!(
            MachineCpu::parse("cpu  1 2 x 4 5 6 7 8\n"),
            None,
            "not a number"
        );
    }

    #[test]
    fn this_machine_says() {
        // Linux, where the suite runs: the counters exist and only grow.
        let a = MachineCpu::read().expect("/proc/stat");
        let b = MachineCpu::read().expect("/proc/stat");
        assert!(b.busy >= a.busy && b.idle >= a.idle);
    }
}
