//! Messages on gateway streams (dispatcher → gateway) and event payloads (gateway → browser).

use serde::{Deserialize, Serialize};

use crate::ids::{PlaceId, QueueId};

/// The stream entry field that carries a [`StreamMessage`] as JSON.
pub const STREAM_FIELD: &str = "m";

/// One admission, as delivered to the gateway holding the browser.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Admission {
    pub place: PlaceId,
    pub token: String,
    /// When the dispatcher admitted the place (ms since the epoch).
    pub admitted_at_ms: u64,
    /// When the entry token and the active session expire (ms since the epoch).
    pub expires_at_ms: u64,
}

/// A snapshot of one queue's line, published once per tick to every gateway holding browsers
/// of that queue. Gateways derive each browser's position from it (see [`crate::position`]),
/// so the cost of keeping positions fresh does not grow with the number of waiters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueState {
    pub queue: QueueId,
    /// Snapshot time (ms since the epoch).
    pub at_ms: u64,
    /// Places waiting.
    pub waiting: u64,
    /// Admissions per second used for ETAs.
    pub rate: f64,
    /// The first places of the line, exactly: `[first place, count]` runs of consecutive ids.
    pub runs: Vec<(u64, u64)>,
    /// Beyond the exact window: `[place, position]` samples, consecutive positions at most 1%
    /// apart; the last one is the tail of the line.
    pub samples: Vec<(u64, u64)>,
}

impl Default for QueueId {
    fn default() -> Self {
        QueueId::new("_").unwrap_or_else(|_| unreachable!("'_' is a valid queue id"))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamMessage {
    /// Places admitted; each gets its `admitted` event.
    Admitted {
        queue: QueueId,
        items: Vec<Admission>,
    },
    /// Places admitted whose tokens were staged on this gateway before the tick (see
    /// [`StreamMessage::Staged`]); each gets its `admitted` event with the staged token.
    AdmittedStaged {
        queue: QueueId,
        admitted_at_ms: u64,
        expires_at_ms: u64,
        places: Vec<PlaceId>,
    },
    /// Entry tokens for places expected at the head of the line at the next tick, sent ahead
    /// so that the admission itself is a short list of places. Not an admission: the gateway
    /// keeps them unseen until an [`StreamMessage::AdmittedStaged`] names the place, and
    /// forgets them otherwise.
    Staged {
        queue: QueueId,
        items: Vec<Admission>,
    },
    /// The line moved.
    State(QueueState),
    /// The queue was closed: every browser waiting in it gets `closed`.
    Closed { queue: QueueId, reason: String },
    /// One place is no longer held here (it left, or a newer connection took it over on
    /// another gateway): end that connection without releasing the place.
    Ended {
        queue: QueueId,
        place: PlaceId,
        reason: String,
    },
}

/// `event: waiting` payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitingEvent {
    pub queue: QueueId,
    /// 1-based; 1 = next to be admitted.
    pub position: u64,
    pub waiting: u64,
    pub eta_seconds: u64,
    /// When this position was computed (ms since the epoch): the dispatcher's snapshot time,
    /// or the moment of joining or resuming.
    pub as_of_ms: u64,
}

/// `event: admitted` payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdmittedEvent {
    pub queue: QueueId,
    pub token: String,
    /// RFC 3339.
    pub expires_at: String,
    /// RFC 3339 with milliseconds: when the dispatcher admitted the place.
    pub admitted_at: String,
}

/// `event: closed` payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClosedEvent {
    pub queue: QueueId,
    pub reason: String,
}

/// Seconds until admission at `rate` per second for `position`.
pub fn eta_seconds(position: u64, rate: f64) -> u64 {
    if rate <= 0.0 || !rate.is_finite() {
        return 0;
    }
    (position as f64 / rate).ceil() as u64
}

impl AdmittedEvent {
    pub fn new(queue: QueueId, a: &Admission) -> Self {
        Self {
            queue,
            token: a.token.clone(),
            expires_at: crate::time::rfc3339_ms(a.expires_at_ms),
            admitted_at: crate::time::rfc3339_ms(a.admitted_at_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_messages_are_tagged_json() {
        let m = StreamMessage::Closed {
            queue: QueueId::new("q").expect("valid"),
            reason: "closed".into(),
        };
        let s = serde_json::to_string(&m).expect("serialise");
        assert_eq!(s, r#"{"type":"closed","queue":"q","reason":"closed"}"#);
        assert_eq!(serde_json::from_str::<StreamMessage>(&s).expect("parse"), m);
    }

    #[test]
    fn eta_rounds_up() {
        assert_eq!(eta_seconds(10, 4.0), 3);
        assert_eq!(eta_seconds(0, 4.0), 0);
        assert_eq!(eta_seconds(10, 0.0), 0);
    }
}
