//! Every series the gateway exports on `GET /metrics`, named here and nowhere else. Callers
//! record through the small functions below; [`describe`] gives each series its help text.
//!
//! Labels are closed sets (`state`, `reason`): no series is labelled with a queue or a ticket
//! here, so the gateway's series count does not grow with traffic.

use std::sync::OnceLock;

use metrics::{counter, describe_counter, describe_gauge, gauge, Counter};

/// Connections open, by `state`: `streaming` (an SSE stream is held) or `idle` (a keep-alive
/// connection between requests, or one reading a request).
pub(crate) const CONNECTIONS: &str = "usher_gateway_connections";
/// New places taken in a line (joins without a ticket that Redis answered with a place).
pub(crate) const JOINS: &str = "usher_gateway_joins_total";
/// Streams opened with a ticket that Redis answered (the place kept, admitted or gone).
pub(crate) const RESUMES: &str = "usher_gateway_resumes_total";
/// Places left through `DELETE /api/queues/{queue}/tickets/{ticket}`.
pub(crate) const LEAVES: &str = "usher_gateway_leaves_total";
/// Rounds of the away flush done (every 50 ms): each writes the disconnects gathered since
/// the one before. A round counted after a disconnect was seen has written it.
pub(crate) const AWAY_FLUSHES: &str = "usher_gateway_away_flushes_total";
/// `admitted` events written to browsers.
pub(crate) const ADMISSIONS_DELIVERED: &str = "usher_gateway_admissions_delivered_total";
/// Streams answered with `retry:` only, by `reason`; also status polls and leaves refused
/// (`proof`: `403`, `ip_polls` and `place_proofs`: `429`).
pub(crate) const STREAMS_REFUSED: &str = "usher_gateway_streams_refused_total";
/// Client sockets closed, or requests refused, by a limit other than a stream's, by `reason`:
/// `cap` (closed at accept: `--max-sockets` reached), `reserve` (a request other than a health
/// check in the sockets kept for health checks), `ip_sockets` (closed at accept: the client
/// address holds `--ip-max-sockets`), `slow_head` (a head still arriving after a second, shed
/// when sockets ran short), `head_timeout`, `bad_request`.
pub(crate) const SOCKETS_REFUSED: &str = "usher_gateway_sockets_refused_total";
/// Redis requests that failed.
pub(crate) const REDIS_ERRORS: &str = "usher_redis_errors_total";
/// Entries of this gateway's own stream written and not yet read (sampled each heartbeat).
pub(crate) const STREAM_LAG: &str = "usher_gateway_stream_lag";
/// Entries of this gateway's own stream read and not yet acknowledged (each heartbeat).
pub(crate) const STREAM_PENDING: &str = "usher_gateway_stream_pending";
/// 1 while the gateway drains (after SIGTERM), else 0.
pub(crate) const DRAINING: &str = "usher_gateway_draining";
/// Streams still open while draining (0 when not draining): the drain's progress.
pub(crate) const DRAIN_REMAINING: &str = "usher_gateway_drain_remaining_streams";
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
    /// The client address used up its join bucket (`--ip-join-rate`, `--ip-join-burst`).
    IpJoins,
    /// The client address holds `--ip-max-streams` streams here.
    IpStreams,
    /// The client address holds `--ip-max-places` places through this gateway.
    IpPlaces,
    /// A status poll or leave: the client address used up its bucket (`--ip-poll-rate`,
    /// `--ip-poll-burst`); answered `429`.
    IpPolls,
    /// A binding queue's place spent its proofs on this gateway (`limits::PLACE_PROOFS`):
    /// a status poll or leave answered `429`, a stream `retry:`.
    PlaceProofs,
    /// The socket is in the reserve kept for health checks (`--max-sockets`).
    Sockets,
    /// A proof-of-work queue's join came without a good, unspent solution (`event: challenge`).
    Challenge,
    /// A binding queue's request came without a good proof of the browser key
    /// (`event: proof_required`, or `403` from the status route).
    Proof,
    /// A join refused for its invitation (`event: invitation_refused`).
    Invitation,
}

impl Refusal {
    fn label(self) -> &'static str {
        match self {
            Refusal::Cap => "cap",
            Refusal::Redis => "redis",
            Refusal::Draining => "draining",
            Refusal::IpJoins => "ip_joins",
            Refusal::IpStreams => "ip_streams",
            Refusal::IpPlaces => "ip_places",
            Refusal::IpPolls => "ip_polls",
            Refusal::PlaceProofs => "place_proofs",
            Refusal::Sockets => "sockets",
            Refusal::Challenge => "challenge",
            Refusal::Invitation => "invitation",
            Refusal::Proof => "proof",
        }
    }
}

/// The counters bumped once per join or per admission written, taken from the recorder once
/// instead of at every bump: `counter!` looks its series up in the recorder's registry (a
/// hash, a key comparison, a reference count taken and dropped), a visible share of a
/// gateway's own CPU in an admission burst's profile. Set by [`describe`], which runs once
/// the recorder is installed; before that the bumps look their series up as `counter!` does,
/// so a bump made before it is never lost to a handle of no recorder.
struct Hot {
    joins: Counter,
    resumes: Counter,
    admissions_delivered: Counter,
}

static HOT: OnceLock<Hot> = OnceLock::new();

/// Adds one to the hot counter `pick` chooses, or to the series `name` before [`describe`].
fn bump(pick: impl FnOnce(&Hot) -> &Counter, name: &'static str) {
    match HOT.get() {
        Some(hot) => pick(hot).increment(1),
        None => counter!(name).increment(1),
    }
}

/// Gives every series its help text (once per process is enough; repeating is harmless), and
/// keeps the hot counters' handles (see [`Hot`]). Call it after the recorder is installed.
pub(crate) fn describe() {
    HOT.get_or_init(|| Hot {
        joins: counter!(JOINS),
        resumes: counter!(RESUMES),
        admissions_delivered: counter!(ADMISSIONS_DELIVERED),
    });
    describe_gauge!(
        CONNECTIONS,
        "Client connections open, by state (streaming, idle)."
    );
    describe_counter!(JOINS, "New places taken in a line.");
    // >>> door
    describe_counter!(
        DOOR_PERIODS,
        "Open-door periods begun here (an on_outage open queue without redis)."
    );
    describe_gauge!(DOOR_OPEN, "Queues whose door is open here now.");
    describe_counter!(DOOR_ADMITTED, "Browsers let through an open door here.");
    // <<< door
    describe_counter!(RESUMES, "Streams opened with a ticket that Redis answered.");
    describe_counter!(LEAVES, "Places left through the leave route.");
    describe_counter!(
        AWAY_FLUSHES,
        "Rounds of the away flush done: each writes the disconnects gathered since the last."
    );
    describe_counter!(ADMISSIONS_DELIVERED, "Admitted events written to browsers.");
    describe_counter!(
        STREAMS_REFUSED,
        "Streams answered with retry only, and status polls or leaves refused, by reason \
         (cap, redis, draining, ip_joins, ip_streams, ip_places, sockets, challenge, proof, \
         ip_polls, place_proofs)."
    );
    describe_counter!(
        SOCKETS_REFUSED,
        "Sockets closed or requests refused by a limit, by reason (cap, reserve, \
         ip_sockets, slow_head, head_timeout, bad_request)."
    );
    describe_counter!(REDIS_ERRORS, "Redis requests that failed.");
    describe_gauge!(
        STREAM_LAG,
        "Entries of this gateway's stream not yet read (sampled each heartbeat)."
    );
    describe_gauge!(
        STREAM_PENDING,
        "Entries of this gateway's stream read and not yet acknowledged."
    );
    describe_gauge!(DRAINING, "1 while the gateway drains, else 0.");
    describe_gauge!(
        DRAIN_REMAINING,
        "Streams still open while draining (0 when not draining)."
    );
    describe_counter!(
        REDIS_OOM,
        "Redis requests refused because Redis is out of memory."
    );
    usher_core::store::describe_redis_metrics();
}

/// Sets the connection gauges from the counts at scrape time: `open` client connections, of
/// which `streaming` hold a stream; `draining` once the drain started.
pub(crate) fn connections(open: u64, streaming: u64, draining: bool) {
    gauge!(CONNECTIONS, "state" => "streaming").set(streaming as f64);
    gauge!(CONNECTIONS, "state" => "idle").set(open.saturating_sub(streaming) as f64);
    gauge!(DRAINING).set(f64::from(u8::from(draining)));
    gauge!(DRAIN_REMAINING).set(if draining { streaming as f64 } else { 0.0 });
}

/// Sets the stream gauges from a sample of this gateway's stream.
pub(crate) fn stream_sampled(lag: &usher_core::store::StreamLag) {
    gauge!(STREAM_LAG).set(lag.lag as f64);
    gauge!(STREAM_PENDING).set(lag.pending as f64);
}

pub(crate) fn joined() {
    bump(|hot| &hot.joins, JOINS);
}

pub(crate) fn resumed() {
    bump(|hot| &hot.resumes, RESUMES);
}

pub(crate) fn away_flushed() {
    counter!(AWAY_FLUSHES).increment(1);
}

pub(crate) fn left() {
    counter!(LEAVES).increment(1);
}

pub(crate) fn admission_delivered() {
    bump(|hot| &hot.admissions_delivered, ADMISSIONS_DELIVERED);
}

pub(crate) fn refused(reason: Refusal) {
    counter!(STREAMS_REFUSED, "reason" => reason.label()).increment(1);
}

// >>> door
/// Door periods opened on this gateway (`on_outage: "open"` queues without Redis).
pub(crate) const DOOR_PERIODS: &str = "usher_door_periods_total";
/// Queues whose door is open on this gateway now.
pub(crate) const DOOR_OPEN: &str = "usher_door_open";
/// Browsers let through an open door.
pub(crate) const DOOR_ADMITTED: &str = "usher_door_admitted_total";

pub(crate) fn door_opened() {
    counter!(DOOR_PERIODS).increment(1);
}

/// Set at every scrape (0 included, so alert rules always find the series).
pub(crate) fn doors_open(n: usize) {
    gauge!(DOOR_OPEN).set(n as f64);
}

pub(crate) fn door_admitted(n: u64) {
    counter!(DOOR_ADMITTED).increment(n);
}
// <<< door

pub(crate) fn redis_error() {
    counter!(REDIS_ERRORS).increment(1);
}

/// Why a socket was closed or a request refused outside a stream (see [`SOCKETS_REFUSED`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SocketRefusal {
    Cap,
    Reserve,
    IpSockets,
    SlowHead,
    HeadTimeout,
    BadRequest,
}

pub(crate) fn socket_refused(reason: SocketRefusal) {
    let label = match reason {
        SocketRefusal::Cap => "cap",
        SocketRefusal::Reserve => "reserve",
        SocketRefusal::HeadTimeout => "head_timeout",
        SocketRefusal::IpSockets => "ip_sockets",
        SocketRefusal::SlowHead => "slow_head",
        SocketRefusal::BadRequest => "bad_request",
    };
    counter!(SOCKETS_REFUSED, "reason" => label).increment(1);
}

pub(crate) fn redis_out_of_memory() {
    counter!(REDIS_OOM).increment(1);
}
