//! The open door (a queue's `on_outage: "open"`), in the words the dispatcher, the gateways,
//! the store and the booking side share.
//!
//! Gateways reach the dispatcher only through Redis, so a door that opens when Redis is gone
//! must need neither. While Redis is up the dispatcher signs **door tokens** for the queue's
//! coming windows ([`DOOR_WINDOW_SECONDS`] by default) and sends them with each `state`
//! ([`DoorPass`]). A gateway that cannot reach Redis for longer than `door_after_seconds`
//! lets its own connected, waiting browsers through, lowest place id first, at the queue's
//! rate divided by the live gateways it last knew, each with the current window's door
//! token; gateways never mint. A door token is a **bearer pass for its window**: it names no
//! place (`sub` is [`DOOR_SUBJECT`]), every browser let through in one window carries the same
//! one, and the session API and `usher-admission` accept it offline until its `exp`.
//!
//! When Redis answers again the gateway closes the door, takes the places it let through out
//! of the line (they must not be admitted twice) and records the period ([`DoorPeriod`]) where
//! the admin API and the dashboard show it (`Store::close_door`).

use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// What a queue does when a gateway cannot reach Redis.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnOutage {
    /// Nobody is admitted until Redis is back; everyone keeps their place (as before).
    #[default]
    Hold,
    /// After `door_after_seconds` without Redis, each gateway lets its own browsers through
    /// at a bounded rate with the current window's door token.
    Open,
}

impl OnOutage {
    /// The name stored in the queue's `meta` (`on_outage`) and used in the admin API.
    pub fn as_str(self) -> &'static str {
        match self {
            OnOutage::Hold => "hold",
            OnOutage::Open => "open",
        }
    }
}

impl FromStr for OnOutage {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "hold" => Ok(OnOutage::Hold),
            "open" => Ok(OnOutage::Open),
            _ => Err(()),
        }
    }
}

/// `door_after_seconds` when unset: long enough that a Redis failover (seconds) or a
/// restart does not open the door, short enough that a fan does not give up first.
pub const DEFAULT_DOOR_AFTER_SECONDS: u64 = 30;
/// Accepted `door_after_seconds`: at least 1 s, at most an hour.
pub const DOOR_AFTER_SECONDS: std::ops::RangeInclusive<u64> = 1..=3600;
/// A door token's window, by default (the dispatcher's `USHER_DOOR_WINDOW_SECONDS`).
pub const DOOR_WINDOW_SECONDS: u64 = 600;
/// Windows signed ahead, the current one included: the door works this many windows into an
/// outage (at least one full window).
pub const DOOR_WINDOWS_AHEAD: u64 = 2;
/// Clock skew a door token's `nbf` and `exp` allow beyond its window, in seconds.
pub const DOOR_SKEW_SECONDS: u64 = 30;
/// A door token's `sub`: it names no place (verifiers that require `sub` still read it).
pub const DOOR_SUBJECT: &str = "door";
/// Door periods kept per queue (the newest).
pub const DOOR_PERIODS_KEPT: usize = 20;

/// One signed door token and the window it opens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DoorToken {
    /// The window's start (ms since the epoch; the token's `door` claim, in seconds).
    pub from_ms: u64,
    /// The window's end (ms since the epoch); the token's `exp` is later by a small skew and the queue's session lifetime.
    pub until_ms: u64,
    pub token: String,
}

/// What a `state` message carries for a queue with `on_outage: "open"` (absent otherwise, and
/// from a dispatcher that predates the door: old gateways ignore it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DoorPass {
    /// `door_after_seconds`, in ms.
    pub after_ms: u64,
    /// The queue's admission rate (per second) when the snapshot was taken.
    pub rate: f64,
    /// Live gateways in the registry then (at least 1): each lets through `rate / gateways`.
    pub gateways: u64,
    /// The tokens of the current and the coming windows.
    pub tokens: Vec<DoorToken>,
}

impl DoorPass {
    /// This gateway's share of the rate.
    pub fn share(&self) -> f64 {
        self.rate / self.gateways.max(1) as f64
    }

    /// The token whose window holds `now_ms`.
    pub fn token_at(&self, now_ms: u64) -> Option<&DoorToken> {
        self.tokens
            .iter()
            .find(|t| t.from_ms <= now_ms && now_ms < t.until_ms)
    }
}

/// The start (ms) of the window of `window_seconds` that holds `now_ms`.
pub fn window_start_ms(now_ms: u64, window_seconds: u64) -> u64 {
    let w = window_seconds.max(1) * 1000;
    now_ms - now_ms % w
}

/// One period a gateway held its door open for a queue, as recorded once Redis was back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DoorPeriod {
    /// The gateway's registry index.
    pub gateway: u16,
    /// RFC 3339: when the door opened (the gateway had not reached Redis for
    /// `door_after_seconds`).
    pub opened_at: String,
    /// RFC 3339: when the door closed (the gateway reached Redis again).
    pub closed_at: String,
    /// Browsers let through.
    pub admitted: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_finds_the_token_of_now_and_shares_the_rate() {
        let t = |from_ms, until_ms| DoorToken {
            from_ms,
            until_ms,
            token: format!("{from_ms}"),
        };
        let pass = DoorPass {
            after_ms: 1000,
            rate: 10.0,
            gateways: 4,
            tokens: vec![t(0, 600_000), t(600_000, 1_200_000)],
        };
        assert_eq!(pass.share(), 2.5);
        assert_eq!(pass.token_at(599_999).map(|t| t.from_ms), Some(0));
        assert_eq!(pass.token_at(600_000).map(|t| t.from_ms), Some(600_000));
        assert_eq!(pass.token_at(1_200_000), None);
        assert_eq!(window_start_ms(1_234_567, 600), 1_200_000);
        assert_eq!("open".parse(), Ok(OnOutage::Open));
        assert_eq!(OnOutage::default().as_str(), "hold");
    }
}
