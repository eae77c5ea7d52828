//! Each browser's whole wait, from the moment it arrives (its connection is scheduled to
//! start) to its admission (`admitted_at`), and when the line emptied: the figures a
//! rehearsal (`usher-rehearse`) predicts, measured on a real run, so `make bench` can compare
//! the two.

use serde::{Deserialize, Serialize};

/// One admitted browser: `[arrived (ms since the epoch), admitted_at (ms since the epoch)]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitRecord(pub u64, pub u64);

impl WaitRecord {
    pub fn wait_ms(&self) -> u64 {
        self.1.saturating_sub(self.0)
    }
}

/// Waits of a run, in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitSummary {
    pub count: usize,
    pub p50_s: f64,
    pub p90_s: f64,
    pub p99_s: f64,
    pub max_s: f64,
    /// The last admission, seconds after the run's start: when the line emptied (of those
    /// admitted; with --until-admitted and no missing admission, of everyone).
    pub line_empty_at_s: f64,
}

/// Nearest-rank percentiles of `records`' waits, and the last admission after `started_ms`;
/// `None` without admissions.
pub fn summarize(records: &[WaitRecord], started_ms: u64) -> Option<WaitSummary> {
    let mut waits: Vec<u64> = records.iter().map(WaitRecord::wait_ms).collect();
    waits.sort_unstable();
    let at = |q: f64| {
        let rank = ((q * waits.len() as f64).ceil() as usize).clamp(1, waits.len());
        waits[rank - 1] as f64 / 1000.0
    };
    let last = records.iter().map(|r| r.1).max()?;
    Some(WaitSummary {
        count: waits.len(),
        p50_s: at(0.5),
        p90_s: at(0.9),
        p99_s: at(0.99),
        max_s: at(1.0),
        line_empty_at_s: last.saturating_sub(started_ms) as f64 / 1000.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_nearest_rank_and_the_line_empties_at_the_last_admission() {
        let records: Vec<WaitRecord> = (0..10)
            .map(|i| WaitRecord(1_000 + i, 2_000 + i * 1_001))
            .collect();
        let s = summarize(&records, 1_000).expect("admissions");
        assert_eq!(s.count, 10);
        // Waits 1.000 s, 2.000 s, … 10.000 s: the 5th is the median.
        assert_eq!(s.p50_s, 5.0);
        assert_eq!(s.max_s, 10.0);
        assert_eq!(
            s.line_empty_at_s,
            (2_000 + 9 * 1_001 - 1_000) as f64 / 1000.0
        );
        assert_eq!(summarize(&[], 0), None);
    }
}
