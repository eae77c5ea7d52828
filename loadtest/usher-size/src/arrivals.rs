//! The arrival curve: how many people join in each second after the sale opens, from a named
//! shape spread over a duration or from a CSV of `second,joins`.

use clap::ValueEnum;
use serde::Serialize;

/// A named arrival curve: `crowd` people over `duration` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// Everyone at an even rate over the duration: the rush at the opening.
    Spike,
    /// A rate rising in a straight line from 0 to twice the average at the end.
    Ramp,
    /// Two equal rushes of half the crowd, each over the first quarter of its half of the
    /// duration (a release, then a second release at half time).
    TwoWaves,
}

impl Shape {
    /// The share of the crowd arrived by `x` seconds into `duration`.
    fn cumulative(self, x: f64, duration: f64) -> f64 {
        let share = |x: f64| x.clamp(0.0, 1.0);
        match self {
            Self::Spike => share(x / duration),
            Self::Ramp => share(x / duration).powi(2),
            Self::TwoWaves => {
                let quarter = duration / 4.0;
                0.5 * share(x / quarter) + 0.5 * share((x - 2.0 * quarter) / quarter)
            }
        }
    }

    /// Joins in each second: second `t` gets the people arrived by `t + 1` less those by `t`,
    /// each rounded, so the seconds add up to exactly `crowd`.
    pub fn joins(self, crowd: u64, duration_s: u64) -> Vec<u64> {
        let arrived =
            |t: u64| (crowd as f64 * self.cumulative(t as f64, duration_s as f64)).round() as u64;
        (0..duration_s)
            .map(|t| arrived(t + 1) - arrived(t))
            .collect()
    }
}

/// Why a CSV arrival curve was refused; every message names the line.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CsvError {
    #[error("line {line}: expected `second,joins`, got {text:?}")]
    Malformed { line: usize, text: String },
    #[error("line {line}: second {second} comes after second {previous}; seconds must increase")]
    NotIncreasing {
        line: usize,
        second: u64,
        previous: u64,
    },
    #[error("line {line}: second {second} is more than a day (86,400 s) after the opening")]
    TooLate { line: usize, second: u64 },
    #[error("no one joins: the curve has no line with joins above 0")]
    Empty,
}

/// The longest curve taken: one day, a second a slot.
const MAX_SECOND: u64 = 86_400;

/// Reads `second,joins` lines (a `second,joins` header, blank lines and `#` comments
/// allowed) into joins per second from 0; seconds not listed have no joins.
pub fn parse_csv(text: &str) -> Result<Vec<u64>, CsvError> {
    let mut joins: Vec<u64> = Vec::new();
    let mut previous: Option<u64> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let content = raw.trim();
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        if previous.is_none() && content.replace(' ', "") == "second,joins" {
            continue;
        }
        let malformed = || CsvError::Malformed {
            line,
            text: raw.to_owned(),
        };
        let (second, count) = content.split_once(',').ok_or_else(malformed)?;
        let second: u64 = second.trim().parse().map_err(|_| malformed())?;
        let count: u64 = count.trim().parse().map_err(|_| malformed())?;
        if let Some(previous) = previous.filter(|p| second <= *p) {
            return Err(CsvError::NotIncreasing {
                line,
                second,
                previous,
            });
        }
        if second >= MAX_SECOND {
            return Err(CsvError::TooLate { line, second });
        }
        previous = Some(second);
        joins.resize(second as usize + 1, 0);
        joins[second as usize] = count;
    }
    if joins.iter().all(|j| *j == 0) {
        return Err(CsvError::Empty);
    }
    Ok(joins)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_spread_the_whole_crowd() {
        let spike = Shape::Spike.joins(100_000, 60);
        assert_eq!(spike.len(), 60);
        assert_eq!(spike.iter().sum::<u64>(), 100_000);
        // 100,000 / 60 = 1,666.7 a second, rounded at each second's total.
        assert!(
            spike.iter().all(|j| *j == 1_666 || *j == 1_667),
            "{spike:?}"
        );

        // The ramp's share by t is (t/D)²: 100 people over 10 s have arrived 0, 1, 4, 9, …,
        // 100 by each second, so the seconds get the odd numbers.
        assert_eq!(
            Shape::Ramp.joins(100, 10),
            vec![1, 3, 5, 7, 9, 11, 13, 15, 17, 19]
        );
        // Two waves of 50 over 2 s each, at 0 and at 4 of 8 s.
        assert_eq!(
            Shape::TwoWaves.joins(100, 8),
            vec![25, 25, 0, 0, 25, 25, 0, 0]
        );
    }

    #[test]
    fn a_csv_gives_joins_per_second_and_names_bad_lines() {
        let csv = "second,joins\n0,10\n\n# a lull\n3,5\n";
        assert_eq!(parse_csv(csv), Ok(vec![10, 0, 0, 5]));
        assert_eq!(
            parse_csv("0,10\n1,ten\n"),
            Err(CsvError::Malformed {
                line: 2,
                text: "1,ten".into()
            })
        );
        assert_eq!(
            parse_csv("0,10\n1;5\n"),
            Err(CsvError::Malformed {
                line: 2,
                text: "1;5".into()
            })
        );
        assert_eq!(
            parse_csv("0,1\n-1,5\n"),
            Err(CsvError::Malformed {
                line: 2,
                text: "-1,5".into()
            })
        );
        assert_eq!(
            parse_csv("5,1\n\n5,2\n"),
            Err(CsvError::NotIncreasing {
                line: 3,
                second: 5,
                previous: 5
            })
        );
        assert_eq!(
            parse_csv("86400,1\n"),
            Err(CsvError::TooLate {
                line: 1,
                second: 86_400
            })
        );
        assert_eq!(parse_csv("second,joins\n0,0\n"), Err(CsvError::Empty));
    }
}
