//! The whole machine's CPU, from `/proc/stat`: how busy all its CPUs were over a span, every
//! process counted (the servers, Redis, the load generator itself).
//!
//! On a machine the servers share with the load generator, this is what a latency ratio
//! hides: a run whose machine was nearly all busy queues every event behind others, and its
//! tail grows with that, whatever each process does ([`crate::report::Report`]'s
//! `machine_busy_while_joining` and the timeline's `machine_busy` say how busy).

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
/// sample before (the first since [`BusySampler::start`]).
pub struct BusySampler {
    last: Option<MachineCpu>,
}

impl BusySampler {
    pub fn start() -> Self {
        Self {
            last: MachineCpu::read(),
        }
    }

    /// The busy share since the previous sample, to three decimals.
    pub fn sample(&mut self) -> Option<f64> {
        let now = MachineCpu::read();
        let busy = now
            .zip(self.last)
            .and_then(|(now, before)| now.busy_since(&before));
        self.last = now;
        busy.map(|b| crate::stats::round_to(b, 3))
    }
}

/// The mean busy share of the intervals in which a cumulative count grew: `points` are a
/// run's timeline, each (the count so far, the machine's busy share since the point before),
/// in order. With the count of joins answered, the seconds of a run's join phase, not the hold
/// after it (a run's first point also covers its workers' start). Each interval counts
/// alike, whatever its length. `None` when no such interval has a share.
pub fn busy_while_growing(points: impl IntoIterator<Item = (u64, Option<f64>)>) -> Option<f64> {
    let mut before = 0;
    let (mut sum, mut n) = (0.0, 0u32);
    for (count, busy) in points {
        if let (true, Some(b)) = (count > before, busy) {
            sum += b;
            n += 1;
        }
        before = before.max(count);
    }
    (n > 0).then(|| sum / f64::from(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_while_growing_averages_the_intervals_with_new_counts() {
        let points = [
            (0, Some(0.10)),   // start-up: nothing joined yet
            (500, Some(0.80)), // joins
            (900, Some(0.90)), // joins
            (900, Some(0.20)), // the hold: none
            (950, None),       // joins, but no reading
            (1000, Some(0.60)),
        ];
        let b = busy_while_growing(points).expect("three intervals");
        assert!((b - (0.80 + 0.90 + 0.60) / 3.0).abs() < 1e-9, "{b}");
        assert_eq!(busy_while_growing([(0, Some(0.5)), (0, Some(0.5))]), None);
        assert_eq!(busy_while_growing([]), None);
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
