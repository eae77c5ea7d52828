//! What a held connection should send next, and how that reads on the wire.

use std::sync::Arc;

use usher_core::ids::QueueId;
use usher_core::messages::{
    Admission, AdmittedEvent, CloseReason, ClosedEvent, LineStatus, NoticeEvent, ScheduledEvent,
    StatusEvent, WaitingEvent,
};
use usher_core::store::TokenRecord;

use crate::frames::{event_frame, json_frame, retry_frame};

/// What a connection should send next.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    Waiting(WaitingEvent),
    /// In a scheduled sale's pre-queue until the draw (which ends the stream with a `retry:`:
    /// the browser resumes into its drawn place). No position updates meanwhile.
    Scheduled(ScheduledEvent),
    /// Admitted by the join itself (passthrough): its token is on its way from the
    /// dispatcher, and nothing is shown until it arrives, so the first event is `admitted`.
    Admitting,
    /// An operator's notice (its rendered `notice` frame, shared by every connection it goes
    /// to), then the browser's current `waiting` event. A notice takes the place of a pending
    /// position update and carries it along, and a later position update changes `waiting`
    /// and keeps the notice; a newer notice replaces an unsent one. Once written, the hub
    /// turns it back into `Waiting` ([`crate::hub::Hub::notice_shown`]).
    Notice {
        notice: Arc<str>,
        waiting: WaitingEvent,
    },
    /// Terminal.
    Admitted(Arc<Admitted>),
    /// Terminal.
    Closed(ClosedEvent),
    /// Terminal, without an event: the gateway is draining, or the connection's channel is
    /// gone. `retry_ms` (when set) is sent as a last `retry:` so the browser reconnects
    /// after that delay and resumes its place.
    Ended {
        retry_ms: Option<u64>,
    },
    /// Terminal: the rendered `draw_void` frame (shared, no `id:` line), then a `retry:` of
    /// `retry_ms`, so the browser resumes into what holds now (a new draw's pre-queue, or its
    /// place in line).
    DrawVoid {
        frame: Arc<str>,
        retry_ms: u64,
    },
}

impl Update {
    pub fn is_terminal(&self) -> bool {
        !matches!(
            self,
            Update::Waiting(_) | Update::Notice { .. } | Update::Scheduled(_) | Update::Admitting
        )
    }

    pub fn superseded() -> Self {
        Update::Ended { retry_ms: None }
    }

    /// The `notice` frame of an operator's message to the line of `queue`: no `id:` line, so
    /// the browser's last event id stays its ticket.
    pub fn notice_frame(queue: &QueueId, message: &str) -> Arc<str> {
        let ev = NoticeEvent {
            queue: queue.clone(),
            message: message.to_owned(),
        };
        event_frame("notice", None, &ev).into()
    }

    /// The `status` frame of a queue going into maintenance or out of it: no `id:` line,
    /// like a notice, and delivered the same way (it rides in [`Update::Notice`]).
    pub fn status_frame(queue: &QueueId, state: LineStatus, message: Option<String>) -> Arc<str> {
        let ev = StatusEvent {
            queue: queue.clone(),
            state,
            message,
        };
        event_frame("status", None, &ev).into()
    }

    /// `closed` with `reason`.
    pub fn closed(queue: &QueueId, reason: CloseReason) -> Self {
        Self::closed_with(queue, reason, None)
    }

    /// `closed` with `reason` and the operator's text (an ended sale's).
    pub fn closed_with(queue: &QueueId, reason: CloseReason, message: Option<String>) -> Self {
        Update::Closed(ClosedEvent {
            queue: queue.clone(),
            reason,
            message,
        })
    }

    /// The SSE text for this update on the stream of `ticket`; `None` for an `Ended` without
    /// a retry.
    pub fn frame(&self, ticket: &str) -> Option<String> {
        match self {
            Update::Waiting(w) => Some(event_frame("waiting", Some(ticket), w)),
            Update::Scheduled(e) => Some(event_frame("scheduled", Some(ticket), e)),
            Update::Notice { notice, waiting } => Some(format!(
                "{notice}{}",
                event_frame("waiting", Some(ticket), waiting)
            )),
            Update::Admitted(a) => Some(json_frame("admitted", Some(ticket), &a.json)),
            Update::Closed(c) => Some(event_frame("closed", None, c)),
            Update::Ended { retry_ms: Some(ms) } => Some(retry_frame(*ms)),
            Update::DrawVoid { frame, retry_ms } => {
                Some(format!("{frame}{}", retry_frame(*retry_ms)))
            }
            Update::Ended { retry_ms: None } | Update::Admitting => None,
        }
    }

    /// Appends this update's SSE text on the stream of `ticket` to `out`: the bytes of
    /// [`Update::frame`], with the two updates a held stream writes most (a position, an
    /// admission) rendered straight into `out` rather than through a `String` of their own.
    pub fn frame_into(&self, out: &mut Vec<u8>, ticket: &str) {
        match self {
            Update::Waiting(w) => crate::frames::waiting_frame_into(out, ticket, w),
            Update::Admitted(a) => {
                crate::frames::json_frame_into(out, "admitted", Some(ticket), &a.json);
            }
            other => {
                if let Some(text) = other.frame(ticket) {
                    out.extend_from_slice(text.as_bytes());
                }
            }
        }
    }
}

/// An `admitted` event with its JSON rendered once: for a staged token, when it is staged,
/// half a tick before the admission, so an admission burst formats no JSON and copies no
/// token. Shared: handing it to a connection is a reference count.
#[derive(Debug, Clone, PartialEq)]
pub struct Admitted {
    pub event: AdmittedEvent,
    /// `event` as JSON (the `data:` of the SSE event).
    pub json: String,
    /// The W3C `traceparent` of the tick that admitted the place, when traces are on: the
    /// delivery's span is its child.
    pub trace: Option<Arc<str>>,
}

impl Admitted {
    pub fn new(event: AdmittedEvent) -> Arc<Self> {
        let json = crate::frames::event_json(&event);
        Arc::new(Self {
            event,
            json,
            trace: None,
        })
    }

    /// This event, admitted by the tick `trace` names (unchanged when `None`, as always
    /// when traces are off: no copy then).
    pub(crate) fn traced(self: Arc<Self>, trace: Option<&Arc<str>>) -> Arc<Self> {
        let Some(t) = trace else {
            return self;
        };
        let mut a = Arc::unwrap_or_clone(self);
        a.trace = Some(t.clone());
        Arc::new(a)
    }

    /// The event of an admission delivered through the stream.
    pub(crate) fn of(queue: &QueueId, a: &Admission) -> Arc<Self> {
        Self::new(AdmittedEvent::new(queue.clone(), a))
    }

    /// The event of an admission read back from Redis.
    pub(crate) fn of_record(queue: &QueueId, rec: &TokenRecord) -> Arc<Self> {
        Self::new(admitted_event(queue, rec))
    }
}

impl std::ops::Deref for Admitted {
    type Target = AdmittedEvent;

    fn deref(&self) -> &AdmittedEvent {
        &self.event
    }
}

/// The `admitted` payload of an entry token read back from Redis.
pub(crate) fn admitted_event(queue: &QueueId, rec: &TokenRecord) -> AdmittedEvent {
    AdmittedEvent::of_token(
        queue.clone(),
        &rec.token,
        rec.admitted_at_ms,
        rec.expires_at_ms,
    )
}

#[cfg(test)]
mod tests {
    use usher_core::messages::{AdmittedEvent, CloseReason, LineStatus, ScheduledEvent};

    use super::*;

    /// What `frame_into` appends is what `frame` renders, for every kind of update (the pump
    /// writes with the one, the set-up and the tests read the other).
    #[test]
    fn frame_into_appends_the_bytes_of_frame() {
        let q = QueueId::new("concert").expect("valid");
        let waiting = WaitingEvent {
            queue: q.clone(),
            position: 7,
            waiting: 90,
            eta_seconds: Some(3),
            as_of_ms: 1_764_230_400_123,
            inventory: None,
            lane: None,
        };
        let updates = [
            Update::Waiting(waiting.clone()),
            Update::Scheduled(ScheduledEvent::new(q.clone(), 1_764_230_400_000)),
            Update::Admitting,
            Update::Notice {
                notice: Update::status_frame(&q, LineStatus::Maintenance, Some("soon".into())),
                waiting,
            },
            Update::Admitted(Admitted::new(AdmittedEvent::of_token(
                q.clone(),
                "eyJ.token.sig",
                1_764_230_400_000,
                1_764_230_700_000,
            ))),
            Update::closed(&q, CloseReason::SoldOut),
            Update::Ended {
                retry_ms: Some(1500),
            },
            Update::Ended { retry_ms: None },
            Update::DrawVoid {
                frame: "event: draw_void\ndata: {}\n\n".into(),
                retry_ms: 900,
            },
        ];
        for u in &updates {
            let mut out = b"before".to_vec();
            u.frame_into(&mut out, "concert.7.tk");
            let want = format!("before{}", u.frame("concert.7.tk").unwrap_or_default());
            assert_eq!(String::from_utf8(out).expect("utf-8"), want, "{u:?}");
        }
        // And the admission's bytes spelled out, not only through `json_frame`.
        let Update::Admitted(a) = &updates[4] else {
            unreachable!("the fifth update is the admission")
        };
        let mut out = Vec::new();
        updates[4].frame_into(&mut out, "concert.7.tk");
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            format!("event: admitted\nid: concert.7.tk\ndata: {}\n\n", a.json)
        );
        assert!(a.json.contains("\"token\":\"eyJ.token.sig\""), "{}", a.json);
    }
}
