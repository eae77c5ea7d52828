//! SSE frames: the text of events, comments and `retry:` fields, as written to a stream.
//!
//! Only text here, no I/O and no gateway state, so every module that renders (the stream
//! pump, the pre-rendered admissions in [`crate::update`]) renders the same bytes.

use std::io::Write as _;

use rand::Rng;
use usher_core::messages::WaitingEvent;

/// The comment a silent stream gets (see [`crate::keepalive`]).
pub(crate) const KEEPALIVE_FRAME: &str = ": keepalive\n\n";

/// An SSE event named `name`, with `data` as its JSON payload.
pub(crate) fn event_frame(name: &str, id: Option<&str>, data: &impl serde::Serialize) -> String {
    json_frame(name, id, &event_json(data))
}

/// The `data:` of an event: its payload as JSON.
pub(crate) fn event_json(data: &impl serde::Serialize) -> String {
    serde_json::to_string(data).unwrap_or_else(|_| "null".into())
}

/// An SSE event whose data is `json`, already rendered.
pub(crate) fn json_frame(name: &str, id: Option<&str>, json: &str) -> String {
    let mut out = Vec::with_capacity(name.len() + id.map_or(0, str::len) + json.len() + 24);
    json_frame_into(&mut out, name, id, json);
    // Only `str`s were appended.
    String::from_utf8(out).unwrap_or_default()
}

/// Appends the bytes of `json_frame(name, id, json)` to `out`: an admission written straight
/// into the buffer of its write, its token copied once.
pub(crate) fn json_frame_into(out: &mut Vec<u8>, name: &str, id: Option<&str>, json: &str) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    if let Some(id) = id {
        out.extend_from_slice(b"\nid: ");
        out.extend_from_slice(id.as_bytes());
    }
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(json.as_bytes());
    out.extend_from_slice(b"\n\n");
}

/// Appends the `waiting` event of `w` on the stream of `ticket` to `out`: the bytes of
/// `event_frame("waiting", Some(ticket), w)`, written field by field instead of through
/// serde. Every held browser gets one of these each tick the line moves, so this is the
/// gateway's hottest rendering: no allocation, no copy of the queue id (serde would clone it
/// into a `String` to serialize it). `frames::tests::a_waiting_frame_is_the_serde_frame`
/// keeps the two spellings the same.
pub(crate) fn waiting_frame_into(out: &mut Vec<u8>, ticket: &str, w: &WaitingEvent) {
    out.extend_from_slice(b"event: waiting\nid: ");
    out.extend_from_slice(ticket.as_bytes());
    out.extend_from_slice(b"\ndata: {\"queue\":");
    json_str(out, w.queue.as_str());
    // Writing to a Vec cannot fail.
    let _ = write!(
        out,
        ",\"position\":{},\"waiting\":{},\"eta_seconds\":",
        w.position, w.waiting
    );
    match w.eta_seconds {
        Some(eta) => {
            let _ = write!(out, "{eta}");
        }
        None => out.extend_from_slice(b"null"),
    }
    let _ = write!(out, ",\"as_of_ms\":{}", w.as_of_ms);
    if let Some(inv) = &w.inventory {
        out.extend_from_slice(b",\"inventory\":");
        let _ = serde_json::to_writer(&mut *out, inv);
    }
    if let Some(lane) = &w.lane {
        out.extend_from_slice(b",\"lane\":");
        json_str(out, lane.as_str());
    }
    out.extend_from_slice(b"}\n\n");
}

/// `s` as a JSON string (quoted and escaped as serde_json does).
fn json_str(out: &mut Vec<u8>, s: &str) {
    let _ = serde_json::to_writer(&mut *out, s);
}

/// A `retry:` field: the browser reconnects `ms` after the stream ends.
pub(crate) fn retry_frame(ms: u64) -> String {
    format!("retry: {ms}\n\n")
}

/// `retry:` delay with ±50% jitter, so browsers told to reconnect together spread out.
pub(crate) fn jittered(ms: u64) -> u64 {
    let f: f64 = rand::thread_rng().gen_range(0.5..1.5);
    (ms as f64 * f) as u64
}

#[cfg(test)]
mod tests {
    use usher_core::ids::QueueId;
    use usher_core::inventory::{Chance, InventoryOutlook};
    use usher_core::lanes::LaneName;

    use super::*;

    #[test]
    fn a_waiting_frame_is_the_serde_frame() {
        let base = WaitingEvent {
            queue: QueueId::new("concert-2026_a").expect("valid"),
            position: 1,
            waiting: 0,
            eta_seconds: None,
            as_of_ms: 0,
            inventory: None,
            lane: None,
        };
        let cases = [
            base.clone(),
            WaitingEvent {
                position: 123_456,
                waiting: u64::MAX,
                eta_seconds: Some(0),
                as_of_ms: 1_764_230_400_123,
                ..base.clone()
            },
            WaitingEvent {
                eta_seconds: Some(u64::MAX),
                inventory: Some(InventoryOutlook {
                    remaining: 42,
                    chance: Chance::Unlikely,
                }),
                ..base.clone()
            },
            WaitingEvent {
                inventory: Some(InventoryOutlook {
                    remaining: 0,
                    chance: Chance::Unknown,
                }),
                lane: Some(LaneName::new("members").expect("valid")),
                ..base.clone()
            },
            WaitingEvent {
                lane: Some(LaneName::new("a_b-1").expect("valid")),
                ..base
            },
        ];
        for w in &cases {
            let mut out = b"kept".to_vec();
            waiting_frame_into(&mut out, "q.12.abc_-", w);
            let want = format!("kept{}", event_frame("waiting", Some("q.12.abc_-"), w));
            assert_eq!(String::from_utf8(out).expect("utf-8"), want, "{w:?}");
        }
    }
}
