//! SSE frames: the text of events, comments and `retry:` fields, as written to a stream.
//!
//! Only text here, no I/O and no gateway state, so every module that renders (the stream
//! pump, the pre-rendered admissions in [`crate::update`]) renders the same bytes.

use rand::Rng;

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
    match id {
        Some(id) => format!("event: {name}\nid: {id}\ndata: {json}\n\n"),
        None => format!("event: {name}\ndata: {json}\n\n"),
    }
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
