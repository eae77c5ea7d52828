//! Lanes with guaranteed shares (issue 24, item 2): a queue's line split into named lanes
//! (say `members` 30 %, `general` 70 %), each first come first served, each with its own
//! positions and ETA. The tick splits each admission budget between the lanes that have
//! somebody present, by share, with a credit per lane kept in Redis so the shares hold
//! even when a tick admits only one or two places (`lua/lanes.lua`); a lane nobody waits in
//! gives its share to the others (work-conserving).
//!
//! Storage (keys.rs): the *default* lane (where a join that names no lane goes) is always the
//! queue's plain `waiting`/`parked` zsets, so queues stored by a version without lanes, and
//! every script that does not care about lanes, see the line they always saw. The other
//! lanes live in lane *slots* 1..=7 (`lane:<slot>:waiting`, `lane:<slot>:parked`), with a
//! hash `lane_of` (place id → slot) for the places outside the default lane, through which
//! every script that looks a place up finds its lane. Slots, not names, are in key names, so
//! the store passes a script every lane's keys without reading the settings first.
//!
//! At most [`MAX_LANES`] lanes per queue, which also bounds the metrics' `lane` label.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Most lanes of one queue (the default lane included).
pub const MAX_LANES: usize = 8;
/// Longest lane name, in bytes.
pub const MAX_LANE_NAME_LEN: usize = 32;

/// A lane's name: 1–32 characters of `[a-z0-9_-]`, safe in JSON, metrics labels, the meta
/// hash's `lanes` field (whose separators `:` and `,` it never contains) and URLs.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(try_from = "String", into = "String")]
#[schema(value_type = String, pattern = "^[a-z0-9_-]{1,32}$", example = "members")]
pub struct LaneName(String);

/// Why lane settings (or a lane name) were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaneError {
    #[error("a lane name must be 1 to {MAX_LANE_NAME_LEN} characters of a-z, 0-9, '_' and '-'")]
    Name,
    #[error("a queue has at most {MAX_LANES} lanes, not {0}")]
    TooMany(usize),
    #[error("lane {0} is named twice")]
    Duplicate(LaneName),
    #[error("lane {0} has share 0: each lane's share is a whole percentage from 1 to 100")]
    ZeroShare(LaneName),
    #[error("the lanes' shares add up to {0}, not 100")]
    ShareSum(u32),
    #[error("default_lane {0} is not one of the lanes")]
    UnknownDefault(LaneName),
    #[error("default_lane is set but no lanes are")]
    DefaultWithoutLanes,
}

impl LaneName {
    pub fn new(s: impl Into<String>) -> Result<Self, LaneError> {
        let s = s.into();
        let ok = !s.is_empty()
            && s.len() <= MAX_LANE_NAME_LEN
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if ok {
            Ok(Self(s))
        } else {
            Err(LaneError::Name)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for LaneName {
    type Err = LaneError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl TryFrom<String> for LaneName {
    type Error = LaneError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl From<LaneName> for String {
    fn from(l: LaneName) -> String {
        l.0
    }
}

impl fmt::Display for LaneName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One lane and its guaranteed share of admissions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Lane {
    pub name: LaneName,
    /// Percentage of admissions this lane gets while it has somebody present (1..=100; the
    /// lanes' shares add up to 100). A lane with nobody present gives its share to the others.
    pub share: u8,
}

/// A queue's lanes: empty (no lanes: one line, as before lanes existed), or 1..=8 lanes with
/// shares adding up to 100 and the lane a join that names none goes to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lanes {
    lanes: Vec<Lane>,
    /// Index in `lanes` of the default lane.
    default: usize,
}

impl Lanes {
    /// Checks `lanes` and picks the default lane: `default_lane` when given, else the **first**
    /// lane listed (the operator lists the lane everyone else is in first, or names it).
    pub fn new(lanes: Vec<Lane>, default_lane: Option<LaneName>) -> Result<Self, LaneError> {
        if lanes.is_empty() {
            return match default_lane {
                Some(_) => Err(LaneError::DefaultWithoutLanes),
                None => Ok(Self::default()),
            };
        }
        if lanes.len() > MAX_LANES {
            return Err(LaneError::TooMany(lanes.len()));
        }
        for (i, l) in lanes.iter().enumerate() {
            if lanes[..i].iter().any(|o| o.name == l.name) {
                return Err(LaneError::Duplicate(l.name.clone()));
            }
            if l.share == 0 {
                return Err(LaneError::ZeroShare(l.name.clone()));
            }
        }
        let sum: u32 = lanes.iter().map(|l| u32::from(l.share)).sum();
        if sum != 100 {
            return Err(LaneError::ShareSum(sum));
        }
        let default = match default_lane {
            None => 0,
            Some(d) => lanes
                .iter()
                .position(|l| l.name == d)
                .ok_or(LaneError::UnknownDefault(d))?,
        };
        Ok(Self { lanes, default })
    }

    pub fn is_empty(&self) -> bool {
        self.lanes.is_empty()
    }

    pub fn lanes(&self) -> &[Lane] {
        &self.lanes
    }

    /// The default lane, when there are lanes.
    pub fn default_lane(&self) -> Option<&LaneName> {
        self.lanes.get(self.default).map(|l| &l.name)
    }
}

/// A lane's effective admission rate: `rate` × its share ÷ the sum of the shares of the lanes
/// with somebody waiting (`busy`: the names of those lanes). The rate a lane's ETA is computed
/// from; a lane alone in line gets the whole rate. 0 for a lane that is not a queue's lane.
pub fn lane_rate(lanes: &[Lane], busy: &[&LaneName], lane: &LaneName, rate: f64) -> f64 {
    let share = |n: &LaneName| {
        lanes
            .iter()
            .find(|l| &l.name == n)
            .map_or(0.0, |l| f64::from(l.share))
    };
    let mine = share(lane);
    let sum: f64 = busy.iter().map(|n| share(n)).sum::<f64>().max(mine);
    if sum <= 0.0 {
        return 0.0;
    }
    rate * mine / sum
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane(name: &str, share: u8) -> Lane {
        Lane {
            name: LaneName::new(name).expect("valid"),
            share,
        }
    }

    #[test]
    fn lane_names_are_short_lowercase_words() {
        for ok in ["members", "a", "general_2", "pre-sale", &"x".repeat(32)] {
            assert!(LaneName::new(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Members", "a b", "a:b", "a,b", "é", &"x".repeat(33)] {
            assert_eq!(LaneName::new(bad), Err(LaneError::Name), "{bad}");
        }
    }

    #[test]
    fn lanes_are_checked_hard() {
        let ok = Lanes::new(vec![lane("general", 70), lane("members", 30)], None).expect("ok");
        assert_eq!(ok.default_lane().map(LaneName::as_str), Some("general"));
        let named = Lanes::new(
            vec![lane("members", 30), lane("general", 70)],
            Some(LaneName::new("general").expect("valid")),
        )
        .expect("ok");
        assert_eq!(named.default_lane().map(LaneName::as_str), Some("general"));
        assert!(Lanes::new(vec![], None).expect("no lanes").is_empty());
        let nine: Vec<Lane> = (0..9).map(|i| lane(&format!("l{i}"), 1)).collect();
        assert_eq!(Lanes::new(nine, None), Err(LaneError::TooMany(9)));
        assert!(matches!(
            Lanes::new(vec![lane("a", 50), lane("a", 50)], None),
            Err(LaneError::Duplicate(_))
        ));
        assert!(matches!(
            Lanes::new(vec![lane("a", 100), lane("b", 0)], None),
            Err(LaneError::ZeroShare(_))
        ));
        assert_eq!(
            Lanes::new(vec![lane("a", 30), lane("b", 30)], None),
            Err(LaneError::ShareSum(60))
        );
        assert!(matches!(
            Lanes::new(
                vec![lane("a", 100)],
                Some(LaneName::new("b").expect("valid"))
            ),
            Err(LaneError::UnknownDefault(_))
        ));
    }

    #[test]
    fn an_empty_lanes_share_flows_to_the_others() {
        let lanes = [lane("members", 30), lane("general", 70)];
        let (m, g) = (&lanes[0].name, &lanes[1].name);
        assert!((lane_rate(&lanes, &[m, g], m, 100.0) - 30.0).abs() < 1e-9);
        assert!((lane_rate(&lanes, &[m, g], g, 100.0) - 70.0).abs() < 1e-9);
        // Only members wait: they get the whole rate.
        assert!((lane_rate(&lanes, &[m], m, 100.0) - 100.0).abs() < 1e-9);
    }
}
