//! Admission policies beyond a fixed rate: the adaptive rate that follows a booking backend's
//! reported load, and why a queue admits at the rate it does ([`RateReason`]).
//!
//! The rate a queue's token bucket refills at is decided here, in Rust, from the queue's
//! settings and its backend's last load report; the tick script receives it as an argument,
//! so no script reads a key outside its queue's slot.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest accepted backend name, in bytes.
pub const MAX_BACKEND_NAME_LEN: usize = 64;

/// A booking backend that reports its load (`PUT /api/backends/{name}/load`). 1–64 characters
/// of `[A-Za-z0-9_-]`, safe in URLs and Redis key names; many queues may follow one backend.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(try_from = "String", into = "String")]
#[schema(value_type = String, pattern = "^[A-Za-z0-9_-]{1,64}$", example = "bookings")]
pub struct BackendName(String);

/// A backend name that is not 1–64 characters of `[A-Za-z0-9_-]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "backend name must be 1 to {MAX_BACKEND_NAME_LEN} characters of letters, digits, '-' and '_'"
)]
pub struct BadBackendName;

impl BackendName {
    pub fn new(s: impl Into<String>) -> Result<Self, BadBackendName> {
        let s = s.into();
        let ok = !s.is_empty()
            && s.len() <= MAX_BACKEND_NAME_LEN
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        ok.then_some(Self(s)).ok_or(BadBackendName)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for BackendName {
    type Error = BadBackendName;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl From<BackendName> for String {
    fn from(b: BackendName) -> String {
        b.0
    }
}

impl fmt::Display for BackendName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An admission rate that follows a backend's load: `max_per_second` at or below `load_low`,
/// `min_per_second` at or above `load_high`, linear in between. Without a report younger than
/// `stale_after_seconds` the backend counts as down and the rate is 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Adaptive {
    pub backend: BackendName,
    pub load_low: f64,
    pub load_high: f64,
    pub min_per_second: f64,
    pub max_per_second: f64,
    pub stale_after_seconds: u64,
}

/// Longest accepted `stale_after_seconds` (one hour); also how long a load report is kept.
pub const MAX_STALE_AFTER_SECONDS: u64 = 3600;

/// Why an [`Adaptive`] setting is refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BadAdaptive {
    #[error("adaptive: load_low and load_high must be finite numbers with load_low < load_high")]
    LoadRange,
    #[error("adaptive: min_per_second and max_per_second must be finite, >= 0 and at most {max}, with min_per_second <= max_per_second")]
    RateRange { max: f64 },
    #[error("adaptive: stale_after_seconds must be between 1 and {MAX_STALE_AFTER_SECONDS}")]
    Stale,
}

impl Adaptive {
    /// Checks the ranges; `max_rate` is the highest admission rate a queue accepts.
    pub fn check(&self, max_rate: f64) -> Result<(), BadAdaptive> {
        if !(self.load_low.is_finite() && self.load_high.is_finite())
            || self.load_low >= self.load_high
        {
            return Err(BadAdaptive::LoadRange);
        }
        let rate_ok = |r: f64| r.is_finite() && (0.0..=max_rate).contains(&r);
        if !rate_ok(self.min_per_second)
            || !rate_ok(self.max_per_second)
            || self.min_per_second > self.max_per_second
        {
            return Err(BadAdaptive::RateRange { max: max_rate });
        }
        if !(1..=MAX_STALE_AFTER_SECONDS).contains(&self.stale_after_seconds) {
            return Err(BadAdaptive::Stale);
        }
        Ok(())
    }

    /// The rate for a reported `load` (seed 004's linear interpolation).
    pub fn rate_for(&self, load: f64) -> f64 {
        if load <= self.load_low {
            return self.max_per_second;
        }
        if load >= self.load_high {
            return self.min_per_second;
        }
        let f = (load - self.load_low) / (self.load_high - self.load_low);
        self.max_per_second - f * (self.max_per_second - self.min_per_second)
    }

    /// The rate at `now_ms` given the backend's last report, or `None` when there is no report
    /// younger than `stale_after_seconds` (the backend counts as down).
    pub fn rate_at(&self, report: Option<LoadReport>, now_ms: u64) -> Option<f64> {
        report
            .filter(|r| now_ms.saturating_sub(r.at_ms) <= self.stale_after_seconds * 1000)
            .map(|r| self.rate_for(r.load))
    }
}

/// A backend's last load report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadReport {
    pub load: f64,
    /// When it was received (ms since the epoch, the dispatcher's clock).
    pub at_ms: u64,
}

impl LoadReport {
    /// `<load>|<at ms>`, as the backend's load key stores it.
    pub fn encode(&self) -> String {
        format!("{}|{}", self.load, self.at_ms)
    }

    pub fn parse(s: &str) -> Option<Self> {
        let (load, at) = s.split_once('|')?;
        let load: f64 = load.parse().ok()?;
        load.is_finite().then_some(Self {
            load,
            at_ms: at.parse().ok()?,
        })
    }
}

/// Why a queue admits at the rate `GET /admin/queues/{q}` shows: a closed set, serialised as
/// its snake_case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RateReason {
    /// `admit_per_second`, as configured.
    Configured,
    /// Interpolated from the backend's fresh load report.
    Adaptive,
    /// Adaptive, and the backend sent no report within `stale_after_seconds`: 0.
    LoadMissing,
    /// Admission is paused: 0.
    Paused,
    /// `max_active` sessions are active: nobody is admitted until a slot frees.
    CapacityFull,
    /// The configured (or adaptive) rate raised to make up for the measured no-show share
    /// (`make_up_no_shows`): rate ÷ (1 − share), at most twice the rate.
    NoShowsMadeUp,
}

impl RateReason {
    /// Every reason, for metrics that export one series each.
    pub const ALL: [RateReason; 6] = [
        RateReason::Configured,
        RateReason::Adaptive,
        RateReason::LoadMissing,
        RateReason::Paused,
        RateReason::CapacityFull,
        RateReason::NoShowsMadeUp,
    ];

    /// The wire name (as serialised in the admin API).
    pub fn as_str(self) -> &'static str {
        match self {
            RateReason::Configured => "configured",
            RateReason::Adaptive => "adaptive",
            RateReason::LoadMissing => "load_missing",
            RateReason::Paused => "paused",
            RateReason::CapacityFull => "capacity_full",
            RateReason::NoShowsMadeUp => "no_shows_made_up",
        }
    }
}

/// The most the no-show make-up multiplies a queue's rate by.
pub const MAX_MAKE_UP_FACTOR: f64 = 2.0;

/// Outcomes (arrived or not) the no-show share needs before it is shown or used: below this,
/// one early no-show would double the rate.
pub const MIN_ARRIVAL_OUTCOMES: u64 = 10;

/// Longest accepted `arrival_seconds` (one hour); it must also be below the session's TTL.
pub const MAX_ARRIVAL_SECONDS: u64 = 3600;

/// The share of sessions that never arrived among the last `outcomes` that ended (arrived or
/// not; meta `arrivals_n` and `no_shows_n`, over the last 200), or `None` below
/// [`MIN_ARRIVAL_OUTCOMES`].
pub fn no_show_ratio(outcomes: u64, no_shows: u64) -> Option<f64> {
    (outcomes >= MIN_ARRIVAL_OUTCOMES).then(|| no_shows.min(outcomes) as f64 / outcomes as f64)
}

/// `rate ÷ (1 − share)`, capped at [`MAX_MAKE_UP_FACTOR`] × `rate` (a share of ½ or more gets
/// the cap).
pub fn make_up_rate(rate: f64, share: f64) -> f64 {
    let cap = rate * MAX_MAKE_UP_FACTOR;
    if share >= 1.0 {
        return cap;
    }
    (rate / (1.0 - share.max(0.0))).min(cap)
}

/// Where a queue's token bucket rate comes from (see [`RateSource::rate`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RateSource {
    /// `admit_per_second`.
    Configured(f64),
    /// The adaptive rate for a fresh load report.
    Adaptive(f64),
    /// Adaptive, without a fresh report.
    LoadMissing,
    /// One of the two above, raised to make up for no-shows (see [`RateSource::made_up`]).
    MadeUp(f64),
}

impl RateSource {
    /// A queue's source at `now_ms`: `admit_per_second`, or the adaptive rate for the
    /// backend's last report.
    pub fn of(
        admit_per_second: f64,
        adaptive: Option<&Adaptive>,
        report: Option<LoadReport>,
        now_ms: u64,
    ) -> Self {
        match adaptive {
            None => Self::Configured(admit_per_second),
            Some(a) => a
                .rate_at(report, now_ms)
                .map_or(Self::LoadMissing, Self::Adaptive),
        }
    }

    /// This source made up for a measured no-show share (`None`: not measured yet, or
    /// `make_up_no_shows` off): `rate ÷ (1 − share)`, so the sessions that do arrive come at
    /// the rate configured, never above twice the rate ([`MAX_MAKE_UP_FACTOR`]). A share of 0,
    /// a paused or silent source stays as it is.
    pub fn made_up(self, no_show_ratio: Option<f64>) -> Self {
        match (self, no_show_ratio) {
            (Self::Configured(r) | Self::Adaptive(r), Some(share)) if share > 0.0 && r > 0.0 => {
                Self::MadeUp(make_up_rate(r, share))
            }
            _ => self,
        }
    }

    /// The rate the token bucket refills at (what the tick script is given).
    pub fn rate(self) -> f64 {
        match self {
            Self::Configured(r) | Self::Adaptive(r) | Self::MadeUp(r) => r,
            Self::LoadMissing => 0.0,
        }
    }

    /// The rate the queue admits at now, and why: paused and full queues admit nobody.
    pub fn effective(self, paused: bool, full: bool) -> (f64, RateReason) {
        match self {
            _ if paused => (0.0, RateReason::Paused),
            Self::LoadMissing => (0.0, RateReason::LoadMissing),
            _ if full => (0.0, RateReason::CapacityFull),
            Self::Adaptive(r) => (r, RateReason::Adaptive),
            Self::MadeUp(r) => (r, RateReason::NoShowsMadeUp),
            Self::Configured(r) => (r, RateReason::Configured),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_reason_names_are_the_wire_names() {
        for r in RateReason::ALL {
            assert_eq!(serde_json::to_value(r).ok(), Some(r.as_str().into()));
        }
    }

    fn adaptive() -> Adaptive {
        Adaptive {
            backend: BackendName::new("booking-main").expect("valid"),
            load_low: 0.0,
            load_high: 100.0,
            min_per_second: 1.0,
            max_per_second: 50.0,
            stale_after_seconds: 10,
        }
    }

    #[test]
    fn the_rate_interpolates_between_the_loads() {
        let a = adaptive();
        assert_eq!(a.rate_for(-5.0), 50.0);
        assert_eq!(a.rate_for(0.0), 50.0);
        assert_eq!(a.rate_for(50.0), 25.5);
        assert_eq!(a.rate_for(100.0), 1.0);
        assert_eq!(a.rate_for(1e9), 1.0);
    }

    #[test]
    fn a_stale_or_missing_report_means_zero() {
        let a = adaptive();
        let r = LoadReport {
            load: 0.0,
            at_ms: 1_000,
        };
        let of = |report, now| RateSource::of(9.0, Some(&a), report, now);
        assert_eq!(of(Some(r), 11_000), RateSource::Adaptive(50.0));
        assert_eq!(of(Some(r), 11_001), RateSource::LoadMissing);
        assert_eq!(of(None, 0).rate(), 0.0);
        let fixed = RateSource::of(9.0, None, None, 0);
        assert_eq!(fixed.effective(false, false), (9.0, RateReason::Configured));
        assert_eq!(fixed.effective(true, false), (0.0, RateReason::Paused));
        assert_eq!(
            fixed.effective(false, true),
            (0.0, RateReason::CapacityFull)
        );
        assert_eq!(
            RateSource::LoadMissing.effective(false, true),
            (0.0, RateReason::LoadMissing)
        );
        assert_eq!(
            RateSource::Adaptive(5.0).effective(false, false),
            (5.0, RateReason::Adaptive)
        );
    }

    #[test]
    fn no_shows_are_made_up_up_to_twice_the_rate() {
        assert_eq!(no_show_ratio(9, 9), None, "too few outcomes");
        assert_eq!(no_show_ratio(10, 5), Some(0.5));
        assert_eq!(make_up_rate(10.0, 0.2), 12.5);
        assert_eq!(make_up_rate(10.0, 0.5), 20.0);
        assert_eq!(make_up_rate(10.0, 0.9), 20.0);
        assert_eq!(make_up_rate(10.0, 1.0), 20.0);
        let made_up = RateSource::Configured(10.0).made_up(Some(0.2));
        assert_eq!(made_up, RateSource::MadeUp(12.5));
        assert_eq!(
            made_up.effective(false, false),
            (12.5, RateReason::NoShowsMadeUp)
        );
        assert_eq!(made_up.effective(true, false), (0.0, RateReason::Paused));
        assert_eq!(
            made_up.effective(false, true),
            (0.0, RateReason::CapacityFull)
        );
        assert_eq!(
            RateSource::Configured(10.0).made_up(Some(0.0)),
            RateSource::Configured(10.0)
        );
        assert_eq!(
            RateSource::Configured(10.0).made_up(None),
            RateSource::Configured(10.0)
        );
        assert_eq!(
            RateSource::LoadMissing.made_up(Some(0.5)),
            RateSource::LoadMissing
        );
    }

    #[test]
    fn bad_settings_and_reports_are_refused() {
        let mut a = adaptive();
        assert_eq!(a.check(1e6), Ok(()));
        a.load_low = 100.0;
        assert_eq!(a.check(1e6), Err(BadAdaptive::LoadRange));
        let mut a = adaptive();
        a.min_per_second = 60.0;
        assert!(matches!(a.check(1e6), Err(BadAdaptive::RateRange { .. })));
        let mut a = adaptive();
        a.stale_after_seconds = 0;
        assert_eq!(a.check(1e6), Err(BadAdaptive::Stale));
        assert!(BackendName::new("a b").is_err());
        assert!(BackendName::new("").is_err());
        let r = LoadReport {
            load: 42.5,
            at_ms: 7,
        };
        assert_eq!(LoadReport::parse(&r.encode()), Some(r));
        assert_eq!(LoadReport::parse("NaN|7"), None);
    }
}
