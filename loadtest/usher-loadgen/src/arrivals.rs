//! An arrival curve instead of a constant join rate (`--arrivals`): a CSV of `second,joins`,
//! read by usher-size's parser (the format `usher-size` and `usher-rehearse` take), turned
//! into each connection's start time. Within a second, its joins are spread evenly.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

/// Joins in each second from the run's start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Arrivals {
    pub joins: Vec<u64>,
    /// Connections started before each second.
    #[serde(skip)]
    before: Vec<u64>,
}

impl Arrivals {
    /// The curve of `text` (see `usher_size::arrivals::parse_csv`).
    pub fn parse(text: &str) -> Result<Self, usher_size::arrivals::CsvError> {
        let joins = usher_size::arrivals::parse_csv(text)?;
        let before = joins
            .iter()
            .scan(0, |sum, j| {
                let at = *sum;
                *sum += j;
                Some(at)
            })
            .collect();
        Ok(Self { joins, before })
    }

    /// The curve in the file at `path`; the message names the file and, for a bad line, it.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--arrivals {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("--arrivals {}: {e}", path.display()))
    }

    /// Every connection the curve brings.
    pub fn total(&self) -> u64 {
        self.joins.iter().sum()
    }

    /// When connection `j` (0-based, global) starts, after the run's start: the k-th join of
    /// second s starts at s + k / joins(s).
    pub fn offset(&self, j: u64) -> Duration {
        let s = self.before.partition_point(|b| *b <= j).saturating_sub(1);
        let (k, n) = (j - self.before[s], self.joins[s].max(1));
        Duration::from_secs(s as u64) + Duration::from_secs_f64(k as f64 / n as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_start_in_their_second_evenly() {
        let a = Arrivals::parse("second,joins\n0,2\n3,4\n").expect("a curve");
        assert_eq!(a.total(), 6);
        let at: Vec<f64> = (0..6).map(|j| a.offset(j).as_secs_f64()).collect();
        assert_eq!(at, vec![0.0, 0.5, 3.0, 3.25, 3.5, 3.75]);
        assert!(Arrivals::parse("0,1\n1;2\n").is_err());
    }
}
