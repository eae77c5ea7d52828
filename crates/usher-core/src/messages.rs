//! Messages on gateway streams (dispatcher → gateway) and event payloads (gateway → browser).

use serde::{Deserialize, Serialize};

use crate::ids::{PlaceId, QueueId};

/// The stream entry field that carries a [`StreamMessage`] as JSON.
pub const STREAM_FIELD: &str = "m";
/// The optional stream entry field that carries the W3C `traceparent` of the dispatcher span
/// that wrote the entry (a tick), so the gateway's delivery joins its trace. Absent when
/// traces are off, and in entries written before it existed: readers treat both alike.
pub const TRACE_FIELD: &str = "tp";

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
/// of that queue. Gateways derive each browser's position from it (`usher_gateway::position`),
/// so the cost of keeping positions fresh does not grow with the number of waiters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// The last place id handed out when the snapshot was taken. A place at or below it that
    /// the snapshot does not list is no longer waiting, even when the line is empty; a place
    /// above it joined after the snapshot. 0 (also from a dispatcher that predates the field)
    /// says nothing, and the tail of the line is used instead.
    #[serde(default)]
    pub last_place: u64,
    /// The queue's inventory as the booking service last reported it (`None`: no report,
    /// and from a dispatcher that predates the field): gateways tell each browser its
    /// [`crate::inventory::InventoryOutlook`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<crate::inventory::InventoryState>,
    /// Lanes (crate::lanes): each lane's line, its effective rate and its snapshot; empty
    /// without lanes (and from a dispatcher that predates them). The fields above are the
    /// default lane's, its `rate` that lane's effective rate, so a gateway that does not
    /// know lanes still shows the default lane's places their right positions and ETAs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lanes: Vec<LaneState>,
    // >>> door
    /// The open door's tokens and rate share (`on_outage: "open"` queues only; absent
    /// otherwise, and ignored by gateways that predate it): `crate::door`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub door: Option<crate::door::DoorPass>,
    // <<< door
}

/// One lane of a [`QueueState`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaneState {
    pub name: crate::lanes::LaneName,
    /// Joins that name no lane go here (the snapshot's top-level fields are this lane's).
    pub default: bool,
    pub share: u8,
    /// In line in this lane.
    pub waiting: u64,
    /// The lane's effective rate: the queue's rate × its share ÷ the sum of the shares of
    /// the lanes with somebody present ([`crate::lanes::lane_rate`]).
    pub rate: f64,
    pub runs: Vec<(u64, u64)>,
    pub samples: Vec<(u64, u64)>,
}

impl QueueState {
    /// The snapshot of lane `lane` alone, as a snapshot of its own (positions count that
    /// lane only); `None` for a lane the snapshot does not list, or the default lane (the
    /// top-level fields are its).
    pub fn lane_view(&self, lane: &crate::lanes::LaneName) -> Option<QueueState> {
        let l = self.lanes.iter().find(|l| &l.name == lane && !l.default)?;
        Some(QueueState {
            queue: self.queue.clone(),
            at_ms: self.at_ms,
            waiting: l.waiting,
            rate: l.rate,
            runs: l.runs.clone(),
            samples: l.samples.clone(),
            last_place: self.last_place,
            inventory: self.inventory,
            lanes: Vec::new(),
            door: None,
        })
    }

    /// The places admitted before the place at `position` of a line read off this snapshot
    /// whose rate is `rate` (a lane's view: its own rate): with lanes, every lane admits
    /// meanwhile, so that many × the queue's rate ÷ the lane's (the inventory's outlook
    /// counts the baskets of all of them); without lanes, `position` itself.
    pub fn admitted_before(&self, position: u64, rate: f64) -> u64 {
        scaled(position, self.lane_scale(rate))
    }

    /// Places the whole queue admits per place admitted at `rate` (a lane's): the sum of
    /// the lanes' rates ÷ `rate`; 1 without lanes (or when `rate` is the whole rate).
    pub fn lane_scale(&self, rate: f64) -> f64 {
        let total: f64 = self.lanes.iter().map(|l| l.rate).sum();
        if self.lanes.is_empty() || rate <= 0.0 || total <= rate {
            return 1.0;
        }
        total / rate
    }

    /// An empty line of `queue` at time 0: no places, no rate. A starting point for a
    /// snapshot built field by field (`QueueState { waiting, runs, ..QueueState::empty(q) }`);
    /// a snapshot always names its queue, so there is no `Default`.
    pub fn empty(queue: QueueId) -> Self {
        Self {
            queue,
            at_ms: 0,
            waiting: 0,
            rate: 0.0,
            runs: Vec::new(),
            samples: Vec::new(),
            last_place: 0,
            inventory: None,
            lanes: Vec::new(),
            door: None,
        }
    }
}

/// `position` places of a lane, counted in places of the whole queue (`scale` from
/// [`QueueState::lane_scale`]).
pub fn scaled(position: u64, scale: f64) -> u64 {
    if scale <= 1.0 {
        return position;
    }
    (position as f64 * scale).ceil() as u64
}

/// Why a stream ended with `closed`, or why a gateway stopped holding a place. A closed set:
/// the dispatcher and the gateways agree on it by type, and its wire form is the snake_case
/// name (`"queue_closed"`, …), byte for byte what browsers have always received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CloseReason {
    /// The ticket left the line (`DELETE /api/queues/{queue}/tickets/{ticket}`).
    Left,
    /// An admin closed the queue.
    QueueClosed,
    /// An admin closed the queue because everything is sold
    /// (`DELETE /admin/queues/{queue}?reason=sold_out`).
    SoldOut,
    /// The place vanished (e.g. Redis lost it in a crash).
    PlaceLost,
    /// The place was admitted and its session has ended (the booking service released it, or
    /// it expired): a resume never shows the old token again.
    SessionEnded,
    /// A newer connection for the place was opened (on this or another gateway): the older
    /// connection gets `closed` with this reason, so it does not reconnect and take the place
    /// back (two tabs sharing a ticket would otherwise take turns forever).
    ResumedElsewhere,
    /// An admin ended the sale with a message to the line (`PUT /admin/queues/{queue}`
    /// `{"ended": "…"}`): the line closes like `queue_closed`, and `closed` carries the text.
    Ended,
}

impl CloseReason {
    /// The wire name, as serde writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::Left => "left",
            CloseReason::QueueClosed => "queue_closed",
            CloseReason::SoldOut => "sold_out",
            CloseReason::PlaceLost => "place_lost",
            CloseReason::SessionEnded => "session_ended",
            CloseReason::ResumedElsewhere => "resumed_elsewhere",
            CloseReason::Ended => "ended",
        }
    }
}

/// A wire name that is not a [`CloseReason`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown close reason {0:?}")]
pub struct UnknownCloseReason(pub String);

impl std::str::FromStr for CloseReason {
    type Err = UnknownCloseReason;

    /// Parses a wire name (`"sold_out"`, …), as serde reads it.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        serde_json::from_value(serde_json::Value::String(s.to_owned()))
            .map_err(|_| UnknownCloseReason(s.to_owned()))
    }
}

impl std::fmt::Display for CloseReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
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
    /// The queue was closed: every browser waiting in it gets `closed`, with the operator's
    /// text when the sale was ended with one (absent in entries of earlier versions).
    Closed {
        queue: QueueId,
        reason: CloseReason,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// The queue went into maintenance (with the operator's text) or came out of it: every
    /// browser waiting in it gets `status`.
    Status {
        queue: QueueId,
        state: LineStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// An operator's message to everyone waiting in the queue: each browser gets `notice`.
    Notice { queue: QueueId, message: String },
    /// A scheduled sale's draw ran: every pre-queue stream of the queue ends with a short
    /// `retry:`, and each browser resumes at once into its drawn place (see `lua/draw.lua`).
    Drawn { queue: QueueId },
    /// The booking service reported the queue's inventory: every browser waiting in it hears
    /// its new outlook at once, before the next `state` (which carries it too).
    Inventory {
        queue: QueueId,
        inventory: crate::inventory::InventoryState,
    },
    /// One place is no longer held here (it left, or a newer connection took it over on
    /// another gateway): end that connection without releasing the place.
    Ended {
        queue: QueueId,
        place: PlaceId,
        reason: CloseReason,
    },
}

/// `event: waiting` payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WaitingEvent {
    pub queue: QueueId,
    /// 1-based; 1 = next to be admitted.
    pub position: u64,
    pub waiting: u64,
    /// Seconds until admission at the current rate; `null` while the queue admits nobody
    /// (an adaptive queue whose backend is silent, or whose rate is 0).
    pub eta_seconds: Option<u64>,
    /// When this position was computed (ms since the epoch): the dispatcher's snapshot time,
    /// or the moment of joining or resuming.
    pub as_of_ms: u64,
    /// What is left to sell and whether this place is likely to get some, while the booking
    /// service reports the queue's inventory (absent otherwise, and until the first `state`
    /// after joining).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<crate::inventory::InventoryOutlook>,
    /// The place's lane when it is not in the queue's default lane (absent otherwise):
    /// `position`, `waiting` and `eta_seconds` are that lane's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "members")]
    pub lane: Option<crate::lanes::LaneName>,
}

/// `event: scheduled` payload: the browser is in a scheduled sale's pre-queue, and the draw
/// at `opens_at` puts it in line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScheduledEvent {
    pub queue: QueueId,
    /// RFC 3339.
    pub opens_at: String,
    /// Always `true`: the place takes part in the draw.
    pub joined_pre_queue: bool,
}

impl ScheduledEvent {
    pub fn new(queue: QueueId, opens_at_ms: u64) -> Self {
        Self {
            queue,
            opens_at: crate::time::rfc3339_ms(opens_at_ms),
            joined_pre_queue: true,
        }
    }
}

/// `event: draw_void` payload: the draw this pre-queue place joined was voided (Redis lost the
/// queue before its draw ran, and it came back without the committed seed). Sent once to the
/// pre-queue streams held when a gateway puts the places back, with no `id:` line (the
/// browser's last event id stays its ticket); the stream then ends with a short `retry:`, and
/// the browser's resume gets `scheduled` (a new draw is held) or `waiting` (none is: the
/// pre-queue went into the line in join order). Clients that do not know the event ignore it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DrawVoidEvent {
    pub queue: QueueId,
    pub reason: crate::draw::VoidReason,
    /// The voided commitment, when the gateway saw it published.
    pub voided_commitment: Option<String>,
    /// The commitment of the new draw the places take part in; `null` when none is held.
    pub commitment: Option<String>,
}

/// `event: pre_queue_full` payload: a scheduled sale's pre-queue holds its `max_entrants`
/// already, so this join took no place (no `id:` line: there is no ticket). The stream then
/// ends with a `retry:` ten times the usual; the waiting-room page closes it and says so.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PreQueueFullEvent {
    pub queue: QueueId,
    /// The queue's cap on pre-queue entrants.
    pub max_entrants: u64,
}

/// `event: admitted` payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AdmittedEvent {
    pub queue: QueueId,
    pub token: String,
    /// RFC 3339.
    pub expires_at: String,
    /// RFC 3339 with milliseconds: when the dispatcher admitted the place.
    pub admitted_at: String,
    /// `true` when a gateway let the browser through its open door while Redis was
    /// unreachable (`on_outage: "open"`): `token` is the window's door token, a bearer pass
    /// until `expires_at` that names no place. Absent for an ordinary admission.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub door: bool,
}

/// `event: closed` payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ClosedEvent {
    pub queue: QueueId,
    pub reason: CloseReason,
    /// The operator's text when the sale was ended with one (`reason` = `ended`); absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What a queue's line is doing, as the page tells its browsers: open as usual, or held for
/// maintenance (admission holds, places are kept, joins take a place and wait). An ended
/// sale is a `closed` event with reason `ended`, not a status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LineStatus {
    /// Admitting as configured.
    Open,
    /// Held for maintenance: nobody is admitted until it ends, and everyone keeps their place.
    Maintenance,
}

/// `event: status` payload: the queue went into maintenance (`message` is the operator's
/// text) or came out of it (`state` = `open`, no message). No `id:` line: the browser's last
/// event id stays its ticket. Sent to the streams of the line (a scheduled sale's pre-queue
/// streams read it from the page on their next load).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StatusEvent {
    pub queue: QueueId,
    pub state: LineStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `event: notice` payload: an operator's message to the line ("Section A is sold out").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NoticeEvent {
    pub queue: QueueId,
    pub message: String,
}

/// Longest notice message, in characters.
pub const NOTICE_MAX_CHARS: usize = 500;

/// Why a notice message is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadNotice {
    #[error("message must not be empty")]
    Empty,
    #[error("message must be at most {NOTICE_MAX_CHARS} characters")]
    TooLong,
    #[error("message must not contain control characters")]
    ControlCharacter,
}

/// Checks an operator's notice message: not empty (or blank), at most [`NOTICE_MAX_CHARS`]
/// characters, and no control characters (a newline would also break the SSE framing).
pub fn check_notice(message: &str) -> Result<(), BadNotice> {
    if message.trim().is_empty() {
        return Err(BadNotice::Empty);
    }
    if message.chars().count() > NOTICE_MAX_CHARS {
        return Err(BadNotice::TooLong);
    }
    if message.chars().any(char::is_control) {
        return Err(BadNotice::ControlCharacter);
    }
    Ok(())
}

/// Seconds until admission at `rate` per second for `position`; `None` at a rate of 0 (no
/// estimate, rather than a huge number).
pub fn eta_seconds(position: u64, rate: f64) -> Option<u64> {
    if rate <= 0.0 || !rate.is_finite() {
        return None;
    }
    Some((position as f64 / rate).ceil() as u64)
}

impl AdmittedEvent {
    pub fn new(queue: QueueId, a: &Admission) -> Self {
        Self::of_token(queue, &a.token, a.admitted_at_ms, a.expires_at_ms)
    }

    /// The event for an entry token admitted at `admitted_at_ms` and expiring at
    /// `expires_at_ms` (ms since the epoch), e.g. one read back from Redis.
    pub fn of_token(queue: QueueId, token: &str, admitted_at_ms: u64, expires_at_ms: u64) -> Self {
        Self {
            queue,
            token: token.to_owned(),
            expires_at: crate::time::rfc3339_ms(expires_at_ms),
            admitted_at: crate::time::rfc3339_ms(admitted_at_ms),
            door: false,
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
            reason: CloseReason::QueueClosed,
            message: None,
        };
        let s = serde_json::to_string(&m).expect("serialise");
        assert_eq!(
            s,
            r#"{"type":"closed","queue":"q","reason":"queue_closed"}"#
        );
        assert_eq!(serde_json::from_str::<StreamMessage>(&s).expect("parse"), m);
    }

    #[test]
    fn close_reasons_keep_their_wire_names() {
        for (reason, wire) in [
            (CloseReason::Left, "left"),
            (CloseReason::QueueClosed, "queue_closed"),
            (CloseReason::SoldOut, "sold_out"),
            (CloseReason::PlaceLost, "place_lost"),
            (CloseReason::ResumedElsewhere, "resumed_elsewhere"),
            (CloseReason::SessionEnded, "session_ended"),
            (CloseReason::Ended, "ended"),
        ] {
            let json = format!("\"{wire}\"");
            assert_eq!(serde_json::to_string(&reason).expect("serialise"), json);
            assert_eq!(
                serde_json::from_str::<CloseReason>(&json).expect("parse"),
                reason
            );
            assert_eq!(reason.to_string(), wire);
            assert_eq!(wire.parse::<CloseReason>(), Ok(reason));
        }
        assert!(serde_json::from_str::<CloseReason>("\"closed\"").is_err());
        assert!("closed".parse::<CloseReason>().is_err());
    }

    #[test]
    fn notices_are_checked() {
        assert_eq!(check_notice("Section A is sold out"), Ok(()));
        assert_eq!(check_notice(&"é".repeat(NOTICE_MAX_CHARS)), Ok(()));
        assert_eq!(check_notice(""), Err(BadNotice::Empty));
        assert_eq!(check_notice("  "), Err(BadNotice::Empty));
        assert_eq!(
            check_notice(&"x".repeat(NOTICE_MAX_CHARS + 1)),
            Err(BadNotice::TooLong)
        );
        assert_eq!(check_notice("a\nb"), Err(BadNotice::ControlCharacter));
        assert_eq!(check_notice("a\u{7}"), Err(BadNotice::ControlCharacter));
    }

    #[test]
    fn eta_rounds_up() {
        assert_eq!(eta_seconds(10, 4.0), Some(3));
        assert_eq!(eta_seconds(0, 4.0), Some(0));
        assert_eq!(eta_seconds(10, 0.0), None);
    }
}
