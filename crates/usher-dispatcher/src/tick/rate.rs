//! How fast a queue really admits, and how many a tick is expected to admit.

use std::collections::VecDeque;
use std::time::Duration;

use usher_core::store::TickOutcome;

/// The measured admission rate looks this far back.
const RATE_WINDOW_MS: u64 = 10_000;
/// ... and is used once it covers this long.
const RATE_MIN_WINDOW_MS: u64 = 3_000;

/// Admissions per second over ticks where the line was not exhausted: admissions ÷ time over a
/// sliding window of ticks that found people waiting (so a slow rate admitting one place every
/// few ticks still measures right). Unknown until the window covers a few seconds.
#[derive(Debug, Default)]
pub(super) struct MeasuredRate {
    last_tick_ms: Option<u64>,
    /// Recent ticks that found people waiting: (ms since the previous tick, admitted).
    window: VecDeque<(u64, u64)>,
    rate: Option<f64>,
}

impl MeasuredRate {
    /// The rate, once known.
    pub(super) fn get(&self) -> Option<f64> {
        self.rate
    }

    /// Counts the tick at `now` that ended with `out`.
    pub(super) fn observe(&mut self, now: u64, out: &TickOutcome) {
        if let Some(last) = self.last_tick_ms {
            let ms = now.saturating_sub(last);
            if ms > 0 && out.waiting > 0 {
                self.window.push_back((ms, out.admitted));
                while self.window.iter().map(|w| w.0).sum::<u64>() > RATE_WINDOW_MS {
                    self.window.pop_front();
                }
            }
        }
        self.last_tick_ms = Some(now);
        let (ms, admitted) = self
            .window
            .iter()
            .fold((0u64, 0u64), |(m, a), w| (m + w.0, a + w.1));
        self.rate = (ms >= RATE_MIN_WINDOW_MS).then(|| admitted as f64 * 1000.0 / ms as f64);
    }
}

/// The admissions one tick is expected to make: what the tick script's budget will be.
pub(super) fn expected_per_tick(carry: f64, admit_per_second: f64, tick: Duration) -> u64 {
    (carry + admit_per_second * tick.as_secs_f64()).floor() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(waiting: u64, admitted: u64) -> TickOutcome {
        TickOutcome {
            waiting,
            admitted,
            ..Default::default()
        }
    }

    #[test]
    fn the_rate_counts_only_ticks_with_people_waiting_once_the_window_is_long_enough() {
        let mut rate = MeasuredRate::default();
        rate.observe(0, &outcome(10, 0));
        rate.observe(1_000, &outcome(10, 5));
        rate.observe(2_000, &outcome(10, 5));
        assert_eq!(rate.get(), None, "two seconds are not enough");
        // An empty line admits nobody: not counted against the rate.
        rate.observe(3_000, &outcome(0, 0));
        assert_eq!(rate.get(), None);
        rate.observe(4_000, &outcome(10, 5));
        assert_eq!(rate.get(), Some(5.0));
    }

    #[test]
    fn a_tick_is_expected_to_admit_its_budget() {
        let tick = Duration::from_millis(500);
        assert_eq!(expected_per_tick(0.0, 10.0, tick), 5);
        assert_eq!(expected_per_tick(0.6, 0.9, tick), 1);
    }
}
