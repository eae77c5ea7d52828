//! Positions from a [`QueueState`] snapshot.
//!
//! The dispatcher publishes, once per tick and per queue, the first places of the line exactly
//! (run-length encoded) and, beyond them, samples `(place, position)` whose positions are at
//! most 1% apart. A gateway finds any place's position by binary search: exactly inside the
//! exact window or on a sample, by linear interpolation between two samples otherwise. The true
//! position lies between the two samples' positions, so the error is below the gap, i.e. ≤ 1%.

use usher_core::messages::QueueState;

/// Where a place stands according to a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Waiting at this 1-based position.
    At(u64),
    /// Not in the line any more (admitted, left, or the queue was emptied).
    Gone,
    /// Joined after the snapshot was taken: keep what is known.
    Unknown,
}

/// Reading positions off a snapshot: a trait, since [`QueueState`] is `usher-core`'s and the
/// reading is the gateway's.
pub trait Standings {
    /// The position of `place` in this snapshot.
    fn standing(&self, place: u64) -> Standing;
}

impl Standings for QueueState {
    fn standing(&self, place: u64) -> Standing {
        // Exact window. A place below a run's start that no earlier run covers is a hole.
        let mut before = 0u64;
        for &(first, count) in &self.runs {
            if place < first {
                return Standing::Gone;
            }
            if place < first + count {
                return Standing::At(before + (place - first) + 1);
            }
            before += count;
        }
        // Beyond the exact window. The first sample is the last exact place; the last is the
        // tail of the line. Past the tail (or without samples), the place either joined after
        // the snapshot was taken or is no longer waiting: `last_place` tells which.
        match self.samples.last() {
            Some(&(tail, _)) if place <= tail => {}
            _ if place <= self.last_place => return Standing::Gone,
            _ => return Standing::Unknown,
        }
        let i = self.samples.partition_point(|&(p, _)| p < place);
        let (p2, r2) = self.samples[i];
        if p2 == place {
            return Standing::At(r2);
        }
        if i == 0 {
            return Standing::Gone;
        }
        let (p1, r1) = self.samples[i - 1];
        if r2 <= r1 + 1 {
            // Adjacent positions: nothing waits between these two samples.
            return Standing::Gone;
        }
        let frac = (place - p1) as f64 / (p2 - p1) as f64;
        let est = r1 as f64 + (r2 - r1) as f64 * frac;
        Standing::At((est.round() as u64).clamp(r1 + 1, r2 - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Builds the snapshot the tick script would publish for `line` (sorted place ids).
    fn snapshot(line: &[u64], exact: usize, step: f64) -> QueueState {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for &p in line.iter().take(exact) {
            match runs.last_mut() {
                Some((f, c)) if *f + *c == p => *c += 1,
                _ => runs.push((p, 1)),
            }
        }
        let mut samples = Vec::new();
        let w = line.len() as u64;
        if w > exact as u64 {
            let mut r = exact as u64;
            loop {
                samples.push((line[(r - 1) as usize], r));
                if r >= w {
                    break;
                }
                r = w.min(r + 1.max((r as f64 * step).floor() as u64));
            }
        }
        QueueState {
            waiting: w,
            runs,
            samples,
            ..QueueState::empty(usher_core::ids::QueueId::new("q").expect("valid"))
        }
    }

    #[test]
    fn exact_inside_the_window_and_gone_for_holes() {
        let line = [3, 4, 5, 9, 10, 20];
        let s = snapshot(&line, 100, 0.01);
        for (i, &p) in line.iter().enumerate() {
            assert_eq!(s.standing(p), Standing::At(i as u64 + 1));
        }
        assert_eq!(s.standing(1), Standing::Gone);
        assert_eq!(s.standing(6), Standing::Gone);
        assert_eq!(s.standing(21), Standing::Unknown);
    }

    #[test]
    fn past_the_tail_a_place_is_gone_up_to_the_last_place_handed_out() {
        // Places 21 to 25 were handed out before the snapshot and are no longer waiting.
        let s = QueueState {
            last_place: 25,
            ..snapshot(&[3, 4, 5, 9, 10, 20], 100, 0.01)
        };
        assert_eq!(s.standing(21), Standing::Gone);
        assert_eq!(s.standing(25), Standing::Gone);
        assert_eq!(
            s.standing(26),
            Standing::Unknown,
            "joined after the snapshot"
        );
        // An empty line: everyone handed out so far has left it (admitted, left, dropped).
        let empty = QueueState {
            last_place: 7,
            ..snapshot(&[], 100, 0.01)
        };
        assert_eq!(empty.standing(7), Standing::Gone);
        assert_eq!(empty.standing(8), Standing::Unknown);
        // Without `last_place` (an older dispatcher) nothing past the tail is called gone.
        assert_eq!(snapshot(&[], 100, 0.01).standing(7), Standing::Unknown);
    }

    #[test]
    fn within_one_percent_beyond_the_window_with_random_holes() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let line: Vec<u64> = (1..=300_000u64).filter(|_| rng.gen_bool(0.7)).collect();
        let s = snapshot(&line, 1000, 0.01);
        assert!(s.samples.len() < 700, "{} samples", s.samples.len());
        let mut worst = 0.0f64;
        for (i, &p) in line.iter().enumerate() {
            let truth = i as u64 + 1;
            let Standing::At(got) = s.standing(p) else {
                panic!("place {p} not found")
            };
            if truth <= 1000 {
                assert_eq!(got, truth);
            }
            let err = (got as f64 - truth as f64).abs() / truth as f64;
            worst = worst.max(err);
        }
        assert!(worst <= 0.01, "worst relative error {worst}");
        assert_eq!(s.standing(line[line.len() - 1] + 1), Standing::Unknown);
    }
}
