//! Every series the gateway exports on `GET /metrics`, named here and nowhere else. Callers
//! record through the small functions below; [`describe`] gives each series its help text.
//!
//! Labels are closed sets (`state`, `reason`): no series is labelled with a queue or a ticket
//! here, so the gateway's series count does not grow with traffic.

use metrics::{counter, describe_counter, describe_gauge, gauge};

/// Connections open, by `state`: `streaming` (an SSE stream is held) or `idle` (a keep-alive
/// connection between requests, or one reading a request).
pub(crate) const CONNECTIONS: &str = "usher_gateway_connections";
/// New places taken in a line (joins without a ticket that Redis answered with a place).
pub(crate) const JOINS: &str = "usher_gateway_joins_total";
/// Streams opened with a ticket that Redis answered (the place kept, admitted or gone).
pub(crate) const RESUMES: &str = "usher_gateway_resumes_total";
/// Places left through `DELETE /api/queues/{queue}/tickets/{ticket}`.
pub(crate) const LEAVES: &str = "usher_gateway_leaves_total";
/// `admitted` events written to browsers.
pub(crate) const ADMISSIONS_DELIVERED: &str = "usher_gateway_admissions_delivered_total";
/// Streams answered with `retry:` only, by `reason`.
pub(crate) const STREAMS_REFUSED: &str = "usher_gateway_streams_refused_total";
/// Redis requests that failed.
pub(crate) const REDIS_ERRORS: &str = "usher_redis_errors_total";
/// Redis requests refused because Redis reached `maxmemory` (counted in `REDIS_ERRORS` too).
pub(crate) const REDIS_OOM: &str = "usher_redis_out_of_memory_total";

/// Why a stream was refused (answered `retry:` so the browser tries again, maybe elsewhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The gateway holds `--max-connections` streams already.
    Cap,
    /// Redis did not answer the join or resume.
    Redis,
    /// The gateway is draining.
    Draining,
}

impl Refusal {
    fn label(self) -> &'static str {
        match self {
            Refusal::Cap => "cap",
            Refusal::Redis => "redis",
            Refusal::Draining => "draining",
        }
    }
}

/// Gives every series its help text (once per process is enough; repeating is harmless).
pub(crate) fn describe() {
    describe_gauge!(
        CONNECTIONS,
        "Client connections open, by state (streaming, idle)."
    );
    describe_counter!(JOINS, "New places taken in a line.");
    describe_counter!(RESUMES, "Streams opened with a ticket that Redis answered.");
    describe_counter!(LEAVES, "Places left through the leave route.");
    describe_counter!(ADMISSIONS_DELIVERED, "Admitted events written to browsers.");
    describe_counter!(
        STREAMS_REFUSED,
        "Streams answered with retry only, by reason (cap, redis, draining)."
    );
    describe_counter!(REDIS_ERRORS, "Redis requests that failed.");
    describe_counter!(
        REDIS_OOM,
        "Redis requests refused because Redis is out of memory."
    );
}

/// Sets the connection gauges from the counts at scrape time: `open` client connections, of
/// which `streaming` hold a stream.
pub(crate) fn connections(open: u64, streaming: u64) {
    gauge!(CONNECTIONS, "state" => "streaming").set(streaming as f64);
    gauge!(CONNECTIONS, "state" => "idle").set(open.saturating_sub(streaming) as f64);
}

pub(crate) fn joined() {
    counter!(JOINS).increment(1);
}

pub(crate) fn resumed() {
    counter!(RESUMES).increment(1);
}

pub(crate) fn left() {
    counter!(LEAVES).increment(1);
}

pub(crate) fn admission_delivered() {
    counter!(ADMISSIONS_DELIVERED).increment(1);
}

pub(crate) fn refused(reason: Refusal) {
    counter!(STREAMS_REFUSED, "reason" => reason.label()).increment(1);
}

pub(crate) fn redis_error() {
    counter!(REDIS_ERRORS).increment(1);
}

pub(crate) fn redis_out_of_memory() {
    counter!(REDIS_OOM).increment(1);
}
