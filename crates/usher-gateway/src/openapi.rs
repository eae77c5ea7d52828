//! The gateway's API description (`GET /openapi.json`, OpenAPI 3.1).
//!
//! The router's routes are described by their handlers' `#[utoipa::path]` annotations and
//! registered in one table with them ([`crate::routes::router`]). The event stream is served by
//! [`crate::server`] itself, not by the router: its description is [`stream`] here, in the
//! document's frame ([`ApiDoc`]), together with the shapes of what the stream writes
//! ([`StreamItem`]: each event with its `id:` and payload, the `retry:` field, the keepalive
//! comment). An event added to the stream is a variant added to [`StreamEvent`].

use serde::Serialize;
use usher_core::binding::ProofRequiredEvent;
use usher_core::challenge::ChallengeEvent;
use usher_core::ids::QueueId;
use usher_core::invitation::InvitationRefusedEvent;
use usher_core::messages::{
    AdmittedEvent, ClosedEvent, DrawVoidEvent, NoticeEvent, PreQueueFullEvent, ScheduledEvent,
    StatusEvent, WaitingEvent,
};
use usher_http::openapi::ErrorBody;
use utoipa::{OpenApi, ToSchema};

/// The frame: title, tags, the stream (served outside the router), shared components. The
/// router's paths are added to it.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "usher gateway",
        description = "The browser-facing side of usher: the event stream (Server-Sent Events) that holds a place in line, the ticket routes, a sale's draw record, the waiting-room page, health and metrics.\n\nEvery error is JSON `{\"error\": \"…\"}` (`ErrorBody`), including the server's own: an unknown path → `404`, a wrong method → `405`, a malformed request head (differing `Content-Length` headers, `Content-Length` with `Transfer-Encoding`, a `Last-Event-ID` that is not UTF-8) → `400`, any request body (no route takes one; `Content-Length` above 0, or chunked) → `413`, answered at the head without reading the body, a request head over 16 KiB → `431`, an answer that cannot be produced → `500` (never an empty `200`: answers of any size, such as a draw record of 100,000 entrants, arrive whole). Over a per-IP limit, or in the sockets kept for health checks, a request other than the stream answers `429` with `Retry-After`; the stream answers `200` with a jittered `retry:` instead, as it does whenever the problem is temporary.",
    ),
    paths(stream),
    servers((url = "/", description = "The gateway that serves this document.")),
    tags(
        (name = "browsers", description = "The public contract browsers (EventSource) and the waiting-room page use."),
        (name = "draw", description = "A scheduled sale's public draw record."),
        (name = "page", description = "The built-in waiting-room page."),
        (name = "health", description = "Liveness, readiness and Prometheus metrics."),
        (name = "meta", description = "This document."),
    ),
    components(schemas(ErrorBody, StreamItem)),
)]
pub struct ApiDoc;

/// The ticket: `<queue>.<place>.<mac>`, opaque, URL-safe, HMAC-signed.
#[derive(Serialize, ToSchema)]
#[schema(example = "concert.1042.Xk3n0QeY6cJ1dA")]
pub(crate) struct Ticket(String);

/// An event of the stream, as written: `event: <name>`, then `id: <ticket>` for the events
/// that carry one (so `EventSource` sends it back as `Last-Event-ID` when it reconnects), then
/// `data: <JSON payload>`, then a blank line.
#[derive(Serialize, ToSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
#[allow(dead_code)] // A description: `crate::frames` writes these.
pub(crate) enum StreamEvent {
    /// The place's position; sent on join and whenever it changes (at most once per tick).
    /// The stream continues.
    Waiting { id: Ticket, data: WaitingEvent },
    /// Admitted: the entry token. The stream ends. A resume while the session is active gets
    /// the same event (same token) again.
    Admitted { id: Ticket, data: AdmittedEvent },
    /// The place is in a scheduled sale's pre-queue, waiting for the draw at `opens_at`. After
    /// the draw the stream ends with a short `retry:`, and the resume gets `waiting`.
    Scheduled { id: Ticket, data: ScheduledEvent },
    /// An operator's message to everyone waiting; no `id:` (the last event id stays the
    /// ticket); followed by the current `waiting` event. The stream continues.
    Notice { data: NoticeEvent },
    /// The queue went into maintenance (`state` = `maintenance`, the operator's `message`:
    /// admission holds, the place is kept) or came out of it (`state` = `open`); no `id:`;
    /// followed by the current `waiting` event. The stream continues.
    Status { data: StatusEvent },
    /// The stream ends for good (`reason`); no `id:`. `resumed_elsewhere`: a newer connection
    /// holds the ticket; do not reconnect by yourself.
    Closed { data: ClosedEvent },
    /// The draw this pre-queue place joined was voided (Redis lost the queue before its draw
    /// ran and it came back without the committed seed); no `id:`. The stream ends with a
    /// short `retry:`: the resume gets `scheduled` (a new draw is held) or `waiting`.
    DrawVoid { data: DrawVoidEvent },
    /// A scheduled sale's pre-queue holds its `max_entrants`: this join took no place, no
    /// `id:`. The stream ends with a `retry:` ten times `USHER_RETRY_MS`; the page closes it
    /// and says the draw is full. Never sent to a resume.
    PreQueueFull { data: PreQueueFullEvent },
    /// The queue asks a proof of work and this join brought no good one (`reason`); no place
    /// was taken, no `id:`. Solve `puzzle` and join again with `?pow=<puzzle>.<nonce>`. The
    /// stream ends with a `retry:` ten times `USHER_RETRY_MS`. Never sent to a resume.
    Challenge { data: ChallengeEvent },
    /// The queue binds places to the browser's key (`bind: "browser_key"`) and this request
    /// brought no good proof of it (`reason`: `missing`, `invalid`, `expired`, `replayed`,
    /// `wrong_key`); no `id:`. A join took no place; a resume left the place as it was (its
    /// own browser resumes it with a fresh proof). The stream ends with a `retry:` ten times
    /// `USHER_RETRY_MS`; the page reconnects by itself with a fresh `proof`.
    ProofRequired { data: ProofRequiredEvent },
    /// The join took no place for its invitation (`reason`): `required` (the queue takes only
    /// invited accounts and the join brought no `join` code), `join_code` (the code is unknown,
    /// used or expired: post the invitation again), `admitted_elsewhere` (the account's place
    /// was admitted on another device, on a queue that binds it to that device's key); no
    /// `id:`. The stream ends with a `retry:` ten times `USHER_RETRY_MS`; the page closes it
    /// and says why. Never sent to a resume.
    InvitationRefused { data: InvitationRefusedEvent },
}

/// A `retry:` field: how long `EventSource` waits before it reconnects once the stream ends.
/// Every stream begins with one; a stream ended for a temporary reason (Redis away, the
/// connection cap, a per-IP limit, a drain, a draw) ends with a jittered one.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)] // A description: `crate::frames::retry_frame` writes it.
pub(crate) struct RetryField {
    /// Milliseconds.
    pub retry: u64,
}

/// The keepalive comment (`: keepalive`), written to a stream silent for a keepalive period
/// (`USHER_KEEPALIVE_SECS`); `EventSource` ignores it.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)] // A description: `crate::frames::KEEPALIVE_FRAME` is it.
pub(crate) struct KeepaliveComment {
    #[schema(example = "keepalive")]
    pub comment: String,
}

/// One item of `text/event-stream`: an event, a `retry:` field or a comment.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)] // A description of what the stream writes.
pub(crate) enum StreamItem {
    Event(StreamEvent),
    Retry(RetryField),
    Comment(KeepaliveComment),
}

/// Join the line, or resume a place, and receive its events.
// `crate::server` serves it, outside the router.
#[utoipa::path(
    get,
    path = "/api/queues/{queue}/stream",
    tag = "browsers",
    params(
        ("queue" = QueueId, Path, description = "The queue id."),
        ("ticket" = Option<Ticket>, Query, description = "Resume this place (as `Last-Event-ID` does). Without a ticket (or `Last-Event-ID`) the request joins the line: a new place at its tail."),
        ("pow" = Option<String>, Query, description = "On a queue with `challenge: \"pow\"`: a solved puzzle, `<puzzle>.<nonce>`, where SHA-256 of that string has at least the puzzle's difficulty in leading zero bits. Needed to join (not to resume); a missing, stale, forged or spent one is answered with `event: challenge`. Given twice → `400`."),
        ("proof" = Option<String>, Query, description = "On a queue with `bind: \"browser_key\"`: a fresh proof of possession of the browser's key, required to join and to resume (an ES256 compact JWS whose header carries the public `jwk` and whose payload is `{\"jti\", \"iat\", \"htm\": \"GET\", \"htu\": \"/api/queues/{queue}/stream\"}`; `iat` within 60 s, each `jti` once; docs/security.md). A join binds its place to the key; a resume must prove the key its place joined with, so `Last-Event-ID` alone does not resume there: the page reopens the stream itself with a fresh proof. A missing or bad one is answered with `event: proof_required`. Given twice → `400`."),
        ("join" = Option<String>, Query, description = "A join code from `POST /api/queues/{queue}/invitation` (one use, 60 s): the join is the invited account's. If the account holds a live place, this browser takes it over (the older stream hears `closed` `resumed_elsewhere`); otherwise it takes a new place, the account's one place. Needed to join a queue with `invitations: \"required\"`; ignored on a resume. A missing (where required), unknown, used or expired one is answered with `event: invitation_refused`. Given twice → `400`."),
        ("Last-Event-ID" = Option<Ticket>, Header, description = "Sent by `EventSource` itself when it reconnects: the ticket of the last event, which resumes the place (same position, never a second place), on any gateway."),
    ),
    responses(
        (status = 200, description = "A Server-Sent Events stream (`Cache-Control: no-cache`, `X-Accel-Buffering: no`): a `retry:` line, then events (see `StreamItem`).\n\n- `waiting` (`id:` ticket): the position; sent on join and whenever it changes.\n- `scheduled` (`id:` ticket): in a scheduled sale's pre-queue until the draw.\n- `notice` (no `id:`): an operator's message, followed by the current `waiting`.\n- `status` (no `id:`): the queue went into maintenance (`state`: `maintenance`, with the operator's `message`: admission holds, the place is kept) or out of it (`state`: `open`), followed by the current `waiting`.\n- `admitted` (`id:` ticket): the entry token; the stream ends.\n- `closed` (no `id:`): the stream ends for good, with the reason (`queue_closed`, `sold_out`, `left`, `place_lost`, `session_ended`, `resumed_elsewhere`, `ended`: the operator ended the sale, with its `message`).\n- `draw_void` (no `id:`): the pre-queue's draw was voided by a Redis data loss; the stream ends with a short `retry:`.\n- `challenge` (no `id:`): the queue asks a proof of work and the join brought no good one; a fresh puzzle and the `reason`; the stream ends, no place taken.\n- `proof_required` (no `id:`): the queue binds places to the browser's key and the request brought no good proof of it (`reason`); the stream ends, nothing changed.\n- `invitation_refused` (no `id:`): the join took no place for its invitation (`reason`: `required`, `join_code`, `admitted_elsewhere`); the stream ends.\n- `pre_queue_full` (no `id:`): the scheduled sale's pre-queue holds its `max_entrants`; the stream ends, no place taken.\n- `: keepalive` comments on a silent stream, at least once per `USHER_KEEPALIVE_SECS`.\n\nA temporary problem (Redis away, the connection cap, a per-IP limit, a drain) is also `200`: a jittered `retry:` and the end of the stream, so `EventSource` tries again.",
            content_type = "text/event-stream", body = StreamItem,
            headers(("Cache-Control" = String, description = "`no-cache`"), ("X-Accel-Buffering" = String, description = "`no`: proxies must not buffer the stream"))),
        (status = 400, description = "A malformed queue id, a forged ticket or a ticket of another queue (final: `EventSource` stops).", body = ErrorBody),
        (status = 404, description = "Unknown or closed queue (a ticket of a queue closed as sold out: the error says `sold_out`).", body = ErrorBody),
        (status = 410, description = "The ticket's place no longer exists.", body = ErrorBody),
    ),
)]
#[allow(dead_code)] // The description of the stream `crate::server` serves.
pub(crate) fn stream() {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stream is served outside the router (`request::stream_target`): the path the document
    /// names must be the one the server recognises.
    #[test]
    fn the_documented_stream_path_is_the_served_one() {
        let path = <__path_stream as utoipa::Path>::path();
        assert!(ApiDoc::openapi().paths.paths.contains_key(&path));
        let example = path.replace("{queue}", "q1");
        assert_eq!(crate::request::stream_target(&example), Some(("q1", "")));
    }
}
