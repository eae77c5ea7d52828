//! Correctness checks over every admission of the run: duplicates and FIFO order.

use std::collections::HashSet;

use serde::Serialize;

use crate::proto::AdmissionRecord;

/// A place admitted strictly after a higher (later-joined) place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FifoExample {
    pub place: u64,
    pub admitted_at_ms: u64,
    /// A higher place admitted earlier.
    pub overtaken_by: u64,
    pub overtaken_at_ms: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Checks {
    /// Admissions whose token or place had been seen before.
    pub duplicate_admissions: u64,
    /// Admissions carrying a token already seen.
    pub duplicate_tokens: u64,
    /// Admissions of a place already admitted.
    pub duplicate_places: u64,
    /// Places admitted strictly later than some higher place.
    pub fifo_violations: u64,
    /// Up to 10 of them.
    pub fifo_examples: Vec<FifoExample>,
}

pub fn check(records: &[AdmissionRecord]) -> Checks {
    let mut c = Checks::default();
    let mut tokens = HashSet::with_capacity(records.len());
    let mut places = HashSet::with_capacity(records.len());
    for r in records {
        let new_token = tokens.insert(r.token());
        let new_place = places.insert(r.place());
        c.duplicate_tokens += u64::from(!new_token);
        c.duplicate_places += u64::from(!new_place);
        c.duplicate_admissions += u64::from(!new_token || !new_place);
    }
    let mut sorted: Vec<AdmissionRecord> = records.to_vec();
    sorted.sort_unstable_by_key(|r| (r.place(), r.admitted_at_ms()));
    // From the highest place down: the earliest admission among higher places so far.
    let mut earliest: Option<(u64, u64)> = None; // (admitted_at_ms, place)
    for r in sorted.iter().rev() {
        if let Some((at, place)) = earliest {
            if place > r.place() && r.admitted_at_ms() > at {
                c.fifo_violations += 1;
                if c.fifo_examples.len() < 10 {
                    c.fifo_examples.push(FifoExample {
                        place: r.place(),
                        admitted_at_ms: r.admitted_at_ms(),
                        overtaken_by: place,
                        overtaken_at_ms: at,
                    });
                }
            }
        }
        if earliest.is_none_or(|(at, _)| r.admitted_at_ms() < at) {
            earliest = Some((r.admitted_at_ms(), r.place()));
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(place: u64, at: u64) -> AdmissionRecord {
        AdmissionRecord(place, at, place * 7919, 0)
    }

    #[test]
    fn in_order_batches_are_fine() {
        let rs = [
            rec(3, 200),
            rec(1, 100),
            rec(2, 100),
            rec(4, 200),
            rec(6, 300),
        ];
        assert_eq!(check(&rs), Checks::default());
    }

    #[test]
    fn overtaking_is_a_violation() {
        let rs = [rec(1, 100), rec(2, 300), rec(3, 200), rec(4, 250)];
        let c = check(&rs);
        assert_eq!(c.fifo_violations, 1);
        assert_eq!(
            c.fifo_examples,
            vec![FifoExample {
                place: 2,
                admitted_at_ms: 300,
                overtaken_by: 3,
                overtaken_at_ms: 200
            }]
        );
    }

    #[test]
    fn duplicates_by_token_or_place() {
        let mut rs = vec![rec(1, 100), rec(2, 100)];
        rs.push(AdmissionRecord(3, 100, rs[0].token(), 0));
        rs.push(AdmissionRecord(2, 100, 42, 0));
        let c = check(&rs);
        assert_eq!(
            (
                c.duplicate_admissions,
                c.duplicate_tokens,
                c.duplicate_places
            ),
            (2, 1, 1)
        );
    }
}
