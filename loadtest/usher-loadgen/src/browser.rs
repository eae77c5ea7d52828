//! What one simulated browser knows between requests ([`State`]: its ticket, `retry:`, a
//! pending proof-of-work puzzle) and what it does with each item of its stream ([`Body`]:
//! body framing and SSE parsing straight into [`handle`], which records what the item
//! measures). Nothing here allocates per event: items are borrowed from the parser.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::de::IgnoredAny;
use serde::Deserialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use usher_core::challenge::ChallengeEvent;
use usher_core::messages::ClosedEvent;
use usher_sse::{EventRef, ItemRef, Parser};

use crate::http::{BodyDecoder, Framing, HttpError};
use crate::proto::AdmissionRecord;
use crate::recorder::{inc, now_us, Recorder};
use crate::stats::fingerprint;

/// How a connection ended for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Final {
    Admitted,
    Closed,
    Failed,
    /// Left the line when its patience ran out (`crate::leaving`).
    Left,
}

/// Per-connection state that survives reconnects. Dropping it takes the connection out of
/// the `waiting` gauge.
pub struct State {
    pub rec: Arc<Recorder>,
    pub ticket: Option<String>,
    pub retry: Duration,
    pub started: Instant,
    /// When the browser arrived (the connection was started), ms since the epoch.
    pub arrived_ms: u64,
    /// When it gives up waiting (`--leave-per-minute`).
    pub leaves_at: Option<Instant>,
    /// Got its first `waiting` event.
    pub joined: bool,
    /// Counted in the `waiting` gauge.
    pub in_line: bool,
    /// A proof-of-work puzzle to solve before the next join (`event: challenge`) ...
    pub challenge: Option<ChallengeEvent>,
    /// ... and the solution the next join sends (`?pow=`).
    pub pow: Option<String>,
}

impl State {
    pub fn leave_line(&mut self) {
        if std::mem::take(&mut self.in_line) {
            self.rec
                .waiting
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl Drop for State {
    fn drop(&mut self) {
        self.leave_line();
    }
}

/// One response body being read: its framing, the SSE parser, and whether it carried an
/// event at all.
pub struct Body {
    decoder: BodyDecoder,
    parser: Parser,
    pub any_event: bool,
}

impl Body {
    pub fn new(framing: &Framing) -> Self {
        Self {
            decoder: BodyDecoder::new(framing),
            parser: Parser::new(),
            any_event: false,
        }
    }

    /// The body is complete (see [`BodyDecoder::is_done`]).
    pub fn is_done(&self) -> bool {
        self.decoder.is_done()
    }

    /// Feeds body bytes; each complete item goes to [`handle`] as it is parsed. `Some` when
    /// an item finished the connection (the items after it are ignored, as a page that
    /// closed its `EventSource` ignores them).
    pub fn feed(
        &mut self,
        bytes: &[u8],
        rec: &Recorder,
        st: &mut State,
    ) -> Result<Option<Final>, HttpError> {
        let (parser, any) = (&mut self.parser, &mut self.any_event);
        let mut done = None;
        let decoded = self.decoder.decode(bytes, &mut |payload| {
            parser.push_with(payload, &mut |item| {
                *any |= matches!(item, ItemRef::Event(_));
                if done.is_none() {
                    done = handle(rec, st, item);
                }
            });
        });
        // An end (`admitted`, `closed`) handled before broken framing in the same read still
        // ends the connection: it was recorded, and a retry would record it again.
        match (done, decoded) {
            (Some(f), _) => Ok(Some(f)),
            (None, Err(e)) => Err(e),
            (None, Ok(())) => Ok(None),
        }
    }
}

/// Reacts to one SSE item; `Some` when the connection is finished.
pub fn handle(rec: &Recorder, st: &mut State, item: ItemRef<'_>) -> Option<Final> {
    match item {
        ItemRef::Retry(ms) => {
            st.retry = Duration::from_millis(ms);
            None
        }
        ItemRef::Comment(_) => None,
        ItemRef::Event(e) => {
            if !e.id.is_empty() && st.ticket.as_deref() != Some(e.id) {
                st.ticket = Some(e.id.to_owned());
            }
            match e.event {
                "waiting" => {
                    on_waiting(rec, st, &e);
                    None
                }
                "admitted" => Some(on_admitted(rec, &e, st.arrived_ms)),
                "challenge" => {
                    inc(&rec.challenges);
                    match serde_json::from_str::<ChallengeEvent>(e.data) {
                        Ok(c) => st.challenge = Some(c),
                        Err(_) => rec.error("parse"),
                    }
                    None
                }
                "closed" => {
                    let reason = serde_json::from_str::<ClosedEvent>(e.data)
                        .map(|c| c.reason.to_string())
                        .unwrap_or_else(|_| "unparsable".to_owned());
                    *rec.samples().closed_reasons.entry(reason).or_default() += 1;
                    Some(Final::Closed)
                }
                _ => None,
            }
        }
    }
}

/// What is read of a `waiting` event (`usher_core::messages::WaitingEvent`): its required
/// fields checked, `as_of_ms` kept, nothing copied. It is parsed on every position event
/// (a million a tick at a million held), so nothing is allocated or validated beyond this.
#[derive(Deserialize)]
struct WaitingSeen {
    #[serde(rename = "queue")]
    _queue: IgnoredAny,
    #[serde(rename = "position")]
    _position: u64,
    #[serde(rename = "waiting")]
    _waiting: u64,
    as_of_ms: u64,
}

/// What is read of an `admitted` event (`usher_core::messages::AdmittedEvent`): its required
/// fields, borrowed from the event. Parsed inside the burst being measured, so nothing is
/// copied (a token is about 400 bytes).
#[derive(Deserialize)]
struct AdmittedSeen<'a> {
    #[serde(rename = "queue")]
    _queue: IgnoredAny,
    #[serde(borrow)]
    token: Cow<'a, str>,
    #[serde(rename = "expires_at")]
    _expires_at: IgnoredAny,
    #[serde(borrow)]
    admitted_at: Cow<'a, str>,
}

fn on_waiting(rec: &Recorder, st: &mut State, e: &EventRef<'_>) {
    let now = now_us();
    inc(&rec.waiting_events);
    let w: WaitingSeen = match serde_json::from_str(e.data) {
        Ok(w) => w,
        Err(_) => {
            rec.error("parse");
            return;
        }
    };
    if !st.joined {
        // The connection's first `waiting` event: it holds a place now.
        st.joined = true;
        st.in_line = true;
        inc(&rec.waiting);
        inc(&rec.joined);
        let us = st.started.elapsed().as_micros() as u64;
        if us > crate::proto::SLOW_JOIN_MS * 1000 {
            inc(&rec.slow_joins);
        }
        let mut s = rec.samples();
        s.join.record_us(us);
        s.join_span_us = crate::proto::widen(s.join_span_us, now, now);
    } else {
        let us = now.saturating_sub(w.as_of_ms.saturating_mul(1000));
        rec.samples().position_update.record_us(us);
    }
}

fn on_admitted(rec: &Recorder, e: &EventRef<'_>, arrived_ms: u64) -> Final {
    let now = now_us();
    let a: AdmittedSeen<'_> = match serde_json::from_str(e.data) {
        Ok(a) => a,
        Err(_) => {
            rec.error("parse");
            return Final::Failed;
        }
    };
    let admitted_at_ms = OffsetDateTime::parse(&a.admitted_at, &Rfc3339)
        .ok()
        .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as u64);
    let place = e.id.split('.').nth(1).and_then(|p| p.parse::<u64>().ok());
    let (Some(admitted_at_ms), Some(place)) = (admitted_at_ms, place) else {
        rec.error("parse");
        return Final::Failed;
    };
    let mut s = rec.samples();
    let latency_us = now.saturating_sub(admitted_at_ms.saturating_mul(1000));
    s.admission.record_us(latency_us);
    s.admissions.push(AdmissionRecord(
        place,
        admitted_at_ms,
        fingerprint(&a.token),
        latency_us,
    ));
    s.waits
        .push(crate::waits::WaitRecord(arrived_ms, admitted_at_ms));
    Final::Admitted
}
