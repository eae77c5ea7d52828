//! Every series the dispatcher exports on `GET /metrics`, named here and nowhere else. Callers
//! record through the small functions below; [`describe`] gives each series its help text.
//!
//! Per-queue series carry the label `queue`, set only from ticks of queues that exist in
//! Redis (created through the admin API), so their number is bounded by the queues an operator
//! configured; no series is labelled with a place or a ticket.

use std::time::Duration;

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Unit,
};
use usher_core::ids::QueueId;
use usher_core::policy::RateReason;
use usher_core::store::TickOutcome;

/// How long one tick of every queue this replica drives took (histogram; buckets from
/// `usher_http::metrics::LATENCY_BUCKETS`, 1 ms to 2 s).
pub(crate) const TICK_DURATION: &str = "usher_tick_duration_seconds";
/// Entry tokens signed, ahead of a tick or at it (a pre-minted token a tick did not use counts
/// too: it was signed).
pub(crate) const TOKENS_MINTED: &str = "usher_tokens_minted_total";
/// Places admitted, by `queue`.
pub(crate) const ADMITTED: &str = "usher_admitted_total";
/// Places waiting in line at the last tick, by `queue`.
pub(crate) const QUEUE_WAITING: &str = "usher_queue_waiting";
/// Admitted sessions active at the last tick, by `queue`.
pub(crate) const QUEUE_ACTIVE: &str = "usher_queue_active";
/// The configured tick period (`--tick-ms`), so ticks can be compared with it.
pub(crate) const TICK_PERIOD: &str = "usher_tick_period_seconds";
/// The configured admission rate at the last tick, by `queue`. (The effective rate and its
/// reason, once admission policies exist, belong beside it.)
pub(crate) const QUEUE_ADMIT_RATE: &str = "usher_queue_admit_per_second";
/// The rate the queue admits at after the last tick (0 while paused, full, or adaptive
/// without a fresh load report), by `queue`.
pub(crate) const QUEUE_EFFECTIVE_RATE: &str = "usher_queue_effective_per_second";
/// 1 for the reason of the queue's effective rate at the last tick, 0 for the others, by
/// `queue` and `reason` (`configured`, `adaptive`, `load_missing`, `paused`, `capacity_full`).
pub(crate) const QUEUE_RATE_REASON: &str = "usher_queue_rate_reason";
/// 1 while the queue is paused at the last tick, else 0, by `queue`.
pub(crate) const QUEUE_PAUSED: &str = "usher_queue_paused";
/// Sessions ended for not arriving within `arrival_seconds`, by `queue`.
pub(crate) const NO_SHOWS: &str = "usher_no_shows_total";
/// The measured no-show share (last 200 sessions that arrived or not), by `queue`; absent
/// until measured.
pub(crate) const QUEUE_NO_SHOW_RATIO: &str = "usher_queue_no_show_ratio";
// >>> inventory
/// What is left of the queue's reported inventory at the last tick (the report less a basket
/// per session consumed since), by `queue`; absent while the queue has no report.
pub(crate) const QUEUE_INVENTORY_REMAINING: &str = "usher_queue_inventory_remaining";
// <<< inventory
/// Redis requests that failed.
pub(crate) const REDIS_ERRORS: &str = "usher_redis_errors_total";
/// Redis requests refused because Redis reached `maxmemory` (counted in `REDIS_ERRORS` too).
pub(crate) const REDIS_OOM: &str = "usher_redis_out_of_memory_total";

/// Session calls with a bound token refused because the session spent its proofs here
/// (`session_proof::SESSION_PROOFS`).
pub(crate) const SESSION_PROOFS_REFUSED: &str = "usher_session_proofs_refused_total";
/// Lanes: places admitted and in line, by queue and lane.
pub(crate) const LANE_ADMITTED: &str = "usher_lane_admitted_total";
pub(crate) const LANE_WAITING: &str = "usher_lane_waiting";

// >>> door
/// Door tokens signed (one per queue with `on_outage: "open"` and window), by `queue`.
pub(crate) const DOOR_TOKENS_SIGNED: &str = "usher_door_tokens_signed_total";
/// Session API calls answered for a door token, offline (no Redis), by `queue`.
pub(crate) const DOOR_SESSIONS: &str = "usher_door_session_checks_total";
// <<< door

/// Gives every series its help text (once per process is enough; repeating is harmless).
pub(crate) fn describe() {
    describe_gauge!(
        QUEUE_INVENTORY_REMAINING,
        "What is left of the queue's reported inventory at the last tick, by queue."
    );
    describe_histogram!(
        TICK_DURATION,
        Unit::Seconds,
        "Duration of one tick of every queue this replica drives."
    );
    describe_counter!(TOKENS_MINTED, "Entry tokens signed.");
    describe_counter!(ADMITTED, "Places admitted, by queue.");
    describe_gauge!(
        QUEUE_WAITING,
        "Places waiting in line at the last tick, by queue."
    );
    describe_gauge!(
        QUEUE_ACTIVE,
        "Admitted sessions active at the last tick, by queue."
    );
    describe_counter!(REDIS_ERRORS, "Redis requests that failed.");
    // >>> door
    describe_counter!(
        DOOR_TOKENS_SIGNED,
        "Door tokens signed for the open door (one per window), by queue."
    );
    describe_counter!(
        DOOR_SESSIONS,
        "Session API calls answered offline for a door token, by queue."
    );
    // <<< door
    describe_counter!(
        NO_SHOWS,
        "Sessions ended for not arriving within arrival_seconds, by queue."
    );
    describe_gauge!(
        QUEUE_NO_SHOW_RATIO,
        "Share of the last 200 sessions that never arrived, by queue (once 10 have ended)."
    );
    describe_gauge!(TICK_PERIOD, Unit::Seconds, "The configured tick period.");
    describe_gauge!(
        QUEUE_ADMIT_RATE,
        "The configured admissions per second at the last tick, by queue."
    );
    describe_gauge!(QUEUE_PAUSED, "1 while the queue is paused, by queue.");
    describe_gauge!(
        QUEUE_EFFECTIVE_RATE,
        "The admissions per second the queue admits at after the last tick, by queue."
    );
    describe_gauge!(
        QUEUE_RATE_REASON,
        "1 for the reason of the queue's effective rate, 0 for the others, by queue and reason."
    );
    describe_counter!(
        REDIS_OOM,
        "Redis requests refused because Redis is out of memory."
    );
    describe_counter!(
        SESSION_PROOFS_REFUSED,
        "Session calls with a bound token refused (429) because the session sent proofs faster than SESSION_PROOFS allows."
    );
    describe_counter!(LANE_ADMITTED, "Places admitted, by queue and lane.");
    describe_gauge!(
        LANE_WAITING,
        "Places in line (present and away) at the last tick of this replica, by queue and lane."
    );
    usher_core::store::describe_redis_metrics();
}

pub(crate) fn tick_period(period: Duration) {
    gauge!(TICK_PERIOD).set(period.as_secs_f64());
}

pub(crate) fn tick_took(elapsed: Duration) {
    histogram!(TICK_DURATION).record(elapsed.as_secs_f64());
}

pub(crate) fn tokens_minted(n: usize) {
    counter!(TOKENS_MINTED).increment(n as u64);
}

/// Records one queue's tick: its admissions and the line's size after it.
pub(crate) fn queue_ticked(q: &QueueId, out: &TickOutcome) {
    let queue = q.to_string();
    // lanes: at most 8 a queue (usher_core::lanes::MAX_LANES), so the label stays bounded.
    for l in &out.lanes {
        let lane = l.name.to_string();
        counter!(LANE_ADMITTED, "queue" => queue.clone(), "lane" => lane.clone())
            .increment(l.admitted);
        gauge!(LANE_WAITING, "queue" => queue.clone(), "lane" => lane).set(l.waiting as f64);
    }
    counter!(ADMITTED, "queue" => queue.clone()).increment(out.admitted);
    gauge!(QUEUE_WAITING, "queue" => queue.clone()).set(out.waiting as f64);
    gauge!(QUEUE_ACTIVE, "queue" => queue.clone()).set(out.active as f64);
    gauge!(QUEUE_ADMIT_RATE, "queue" => queue.clone()).set(out.admit_per_second);
    gauge!(QUEUE_PAUSED, "queue" => queue).set(f64::from(u8::from(out.paused)));
}

/// The queue's effective rate and its reason (one series per reason, so a reason that no
/// longer holds reads 0 rather than keeping a stale 1).
pub(crate) fn queue_rate(q: &QueueId, (rate, reason): (f64, RateReason)) {
    let queue = q.to_string();
    gauge!(QUEUE_EFFECTIVE_RATE, "queue" => queue.clone()).set(rate);
    for r in RateReason::ALL {
        gauge!(QUEUE_RATE_REASON, "queue" => queue.clone(), "reason" => r.as_str())
            .set(f64::from(u8::from(r == reason)));
    }
}

/// What is left of the queue's inventory, when the booking service reports it.
pub(crate) fn queue_inventory(q: &QueueId, out: &TickOutcome) {
    if let Some(inv) = out.inventory {
        gauge!(QUEUE_INVENTORY_REMAINING, "queue" => q.to_string()).set(inv.remaining as f64);
    }
}

/// A tick's no-shows, and the queue's measured no-show share once there is one.
pub(crate) fn queue_no_shows(q: &QueueId, no_shows: u64, ratio: Option<f64>) {
    let queue = q.to_string();
    if no_shows > 0 {
        counter!(NO_SHOWS, "queue" => queue.clone()).increment(no_shows);
    }
    if let Some(r) = ratio {
        gauge!(QUEUE_NO_SHOW_RATIO, "queue" => queue).set(r);
    }
}

// >>> door
pub(crate) fn door_token_signed(q: &QueueId) {
    counter!(DOOR_TOKENS_SIGNED, "queue" => q.to_string()).increment(1);
}

pub(crate) fn door_session_check(q: &QueueId) {
    counter!(DOOR_SESSIONS, "queue" => q.to_string()).increment(1);
}
// <<< door

pub(crate) fn redis_error() {
    counter!(REDIS_ERRORS).increment(1);
}

pub(crate) fn redis_out_of_memory() {
    counter!(REDIS_OOM).increment(1);
}

pub(crate) fn session_proofs_refused() {
    counter!(SESSION_PROOFS_REFUSED).increment(1);
}
