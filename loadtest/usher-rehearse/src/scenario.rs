//! The inputs of a rehearsal, read and checked: the arrival curve (usher-size's, so both
//! tools read a curve alike), the behaviours, and the queue's settings as the admin API takes
//! them (`usher_dispatcher::queues_file`, which checks a `PUT` body the way `PUT` does).

use std::path::{Path, PathBuf};

use usher_core::ids::QueueId;
use usher_core::lanes::LaneName;
use usher_core::time::parse_rfc3339_ms;
use usher_dispatcher::queues_file::QueuesFile;
use usher_size::arrivals::{parse_csv, CsvError};

use crate::cli::Args;

/// Why a rehearsal's inputs were refused; each message names the flag, line or setting.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read {flag} {path}: {source}")]
    Read {
        flag: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--arrivals {path}: {source}")]
    Arrivals { path: PathBuf, source: CsvError },
    #[error("--crowd must be at least 1")]
    NoCrowd,
    #[error(
        "--settings {path}: not a JSON object of `PUT /admin/queues/{{queue}}` fields: {reason}"
    )]
    SettingsJson { path: PathBuf, reason: String },
    #[error("--settings {0}")]
    Settings(String),
    #[error("{flag} must be a share from 0 to 1, not {value}")]
    Share { flag: &'static str, value: f64 },
    #[error("--booking-seconds must be seconds (`120`) or a range (`60-180`), not {0:?}")]
    Booking(String),
    #[error("--queue: {0}")]
    Queue(String),
    #[error("--start must be an RFC 3339 time such as \"2030-01-01T00:00:00Z\", not {0:?}")]
    Start(String),
    #[error("--lane-shares: {0}")]
    LaneShares(String),
    #[error("--settings has `adaptive`: give the simulated backend's --backend-capacity")]
    BackendCapacity,
}

/// How long a booking takes, drawn evenly between the two (seconds).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct BookingTime {
    pub low_s: u64,
    pub high_s: u64,
}

impl BookingTime {
    /// `120` or `60-180`.
    pub fn parse(text: &str) -> Result<Self, ScenarioError> {
        let bad = || ScenarioError::Booking(text.to_owned());
        let n = |t: &str| t.trim().parse::<u64>().map_err(|_| bad());
        let (low_s, high_s) = match text.split_once('-') {
            Some((a, b)) => (n(a)?, n(b)?),
            None => (n(text)?, n(text)?),
        };
        if low_s > high_s || high_s > 86_400 {
            return Err(bad());
        }
        Ok(Self { low_s, high_s })
    }
}

/// What browsers do, besides joining.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Behaviours {
    pub leave_per_minute: f64,
    pub no_show: f64,
    pub booking: BookingTime,
    pub reconnect: f64,
    pub away_seconds: u64,
    /// (lane, share of joins); the rest join the default lane.
    pub lane_shares: Vec<(LaneName, f64)>,
}

/// Everything a rehearsal runs from.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub queue: QueueId,
    /// Joins in each second from second 0.
    pub joins: Vec<u64>,
    pub behaviours: Behaviours,
    /// The settings as a queues file of the one queue (checked like `PUT`).
    pub settings: QueuesFile,
    /// The settings as given, for the report.
    pub settings_json: serde_json::Value,
    pub adaptive: bool,
    pub inventory: Option<u64>,
    pub backend_capacity: Option<u64>,
    pub start_ms: u64,
    pub tick_ms: u64,
    pub max_seconds: u64,
    pub seed: u64,
}

fn share(flag: &'static str, value: f64) -> Result<f64, ScenarioError> {
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(ScenarioError::Share { flag, value })
    }
}

fn read(flag: &'static str, path: &Path) -> Result<String, ScenarioError> {
    std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
        flag,
        path: path.to_owned(),
        source,
    })
}

/// A `PUT /admin/queues/{queue}` body for `queue`, checked as the admin API checks it.
pub fn settings(
    queue: &QueueId,
    path: &Path,
    text: &str,
) -> Result<(QueuesFile, serde_json::Value), ScenarioError> {
    let body: serde_json::Value =
        serde_json::from_str(text).map_err(|e| ScenarioError::SettingsJson {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    if !body.is_object() {
        return Err(ScenarioError::SettingsJson {
            path: path.to_owned(),
            reason: "the file holds no JSON object".to_owned(),
        });
    }
    let file = serde_json::json!({ queue.as_str(): body }).to_string();
    let parsed = QueuesFile::parse(path, &file).map_err(|e| {
        // The queues file's message names the file and the queue: say "settings" instead.
        let text = e.to_string();
        ScenarioError::Settings(
            text.strip_prefix("USHER_QUEUES_FILE ")
                .unwrap_or(&text)
                .to_owned(),
        )
    })?;
    Ok((parsed, body))
}

fn lane_shares(given: &[String]) -> Result<Vec<(LaneName, f64)>, ScenarioError> {
    let mut out = Vec::new();
    for item in given.iter().filter(|s| !s.trim().is_empty()) {
        let bad = |why: &str| ScenarioError::LaneShares(format!("{item:?}: {why}"));
        let (name, value) = item
            .split_once('=')
            .ok_or_else(|| bad("expected LANE=SHARE"))?;
        let lane = LaneName::new(name.trim()).map_err(|e| bad(&e.to_string()))?;
        let value: f64 = value
            .trim()
            .parse()
            .map_err(|_| bad("the share is no number"))?;
        if !(0.0..=1.0).contains(&value) {
            return Err(bad("a share is from 0 to 1"));
        }
        out.push((lane, value));
    }
    if out.iter().map(|(_, s)| s).sum::<f64>() > 1.0 + 1e-9 {
        return Err(ScenarioError::LaneShares(
            "the shares add up to more than 1".into(),
        ));
    }
    Ok(out)
}

impl Scenario {
    /// The scenario of `args`, every input read and checked.
    pub fn from_args(args: &Args) -> Result<Self, ScenarioError> {
        let queue = QueueId::new(&args.queue).map_err(|e| ScenarioError::Queue(e.to_string()))?;
        let joins = match &args.arrivals {
            Some(path) => {
                parse_csv(&read("--arrivals", path)?).map_err(|source| ScenarioError::Arrivals {
                    path: path.clone(),
                    source,
                })?
            }
            None => match args.crowd {
                Some(c) if c > 0 => args.shape.joins(c, args.duration),
                _ => return Err(ScenarioError::NoCrowd),
            },
        };
        let (settings, settings_json) =
            settings(&queue, &args.settings, &read("--settings", &args.settings)?)?;
        let adaptive = settings_json.get("adaptive").is_some_and(|a| !a.is_null());
        if adaptive && args.backend_capacity.is_none_or(|c| c == 0) {
            return Err(ScenarioError::BackendCapacity);
        }
        let behaviours = Behaviours {
            leave_per_minute: share("--leave-per-minute", args.leave_per_minute)?,
            no_show: share("--no-show", args.no_show)?,
            booking: BookingTime::parse(&args.booking_seconds)?,
            reconnect: share("--reconnect", args.reconnect)?,
            away_seconds: args.away_seconds,
            lane_shares: lane_shares(&args.lane_shares)?,
        };
        Ok(Self {
            queue,
            joins,
            behaviours,
            settings,
            settings_json,
            adaptive,
            inventory: args.inventory,
            backend_capacity: args.backend_capacity,
            start_ms: parse_rfc3339_ms(&args.start)
                .ok_or_else(|| ScenarioError::Start(args.start.clone()))?,
            tick_ms: args.tick_ms,
            max_seconds: args.max_seconds,
            seed: args.seed,
        })
    }

    /// Everyone the curve brings.
    pub fn crowd(&self) -> u64 {
        self.joins.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booking_times_are_seconds_or_a_range() {
        let t = |low_s, high_s| BookingTime { low_s, high_s };
        assert_eq!(BookingTime::parse("120").ok(), Some(t(120, 120)));
        assert_eq!(BookingTime::parse("60-180").ok(), Some(t(60, 180)));
        for bad in ["", "ten", "180-60", "-5", "1-2-3", "90000"] {
            assert!(BookingTime::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn settings_are_checked_as_put_checks_them() {
        let q = QueueId::new("rehearsal").expect("queue id");
        let p = Path::new("s.json");
        assert!(settings(&q, p, r#"{"admit_per_second": 50, "max_active": 100}"#).is_ok());
        let refused = |text: &str| {
            settings(&q, p, text)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(
            refused("[1, 2]").contains("no JSON object"),
            "{}",
            refused("[1, 2]")
        );
        assert!(refused("{").contains("not a JSON object"));
        let rate = refused(r#"{"admit_per_second": 0}"#);
        assert!(rate.contains("admit_per_second must be > 0"), "{rate}");
        let unknown = refused(r#"{"admit_per_secnd": 5}"#);
        assert!(unknown.contains("admit_per_secnd"), "{unknown}");
    }

    #[test]
    fn lane_shares_name_lanes_and_add_up_to_one_at_most() {
        let given = |v: &[&str]| lane_shares(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let ok = given(&["members=0.25"]).expect("one lane");
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].1, 0.25);
        assert!(given(&["members"]).is_err());
        assert!(given(&["members=2"]).is_err());
        assert!(given(&["a=0.6", "b=0.6"]).is_err());
        assert!(given(&["Not A Lane=0.1"]).is_err());
    }
}
