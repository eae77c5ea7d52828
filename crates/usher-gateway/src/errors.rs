//! The API errors of the browser contract, and the checks on a request's queue and ticket
//! that produce them. Shared by the stream ([`crate::server`]) and the other routes
//! ([`crate::routes`]), so the same request gets the same answer on either.

use crate::ticket::Ticket;
use crate::ticket::TicketKey;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use usher_core::ids::{PlaceId, QueueId};
use usher_core::messages::CloseReason;
use usher_core::store::{OomLog, StoreError};
use usher_http::ApiError;

use crate::metrics::{self, Refusal};

/// The queue named in a path; a malformed name is a 400.
pub(crate) fn parse_queue(raw: &str) -> Result<QueueId, ApiError> {
    QueueId::new(raw).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// The place a ticket names in `q`.
pub(crate) fn check_ticket(
    key: &TicketKey,
    q: &QueueId,
    ticket: &str,
) -> Result<PlaceId, ApiError> {
    // Malformed, forged, or another queue's: all 400.
    Ticket::verify(key, q, ticket).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// How a route other than the stream refuses: an error of the browser contract, or `429`
/// with `Retry-After`.
#[derive(Debug)]
pub(crate) enum RouteError {
    Api(ApiError),
    /// A rate was used up: try again this much later (`Retry-After`, whole seconds, at
    /// least 1); the message says which.
    TooMany(Duration, &'static str),
}

impl From<ApiError> for RouteError {
    fn from(e: ApiError) -> Self {
        RouteError::Api(e)
    }
}

impl IntoResponse for RouteError {
    fn into_response(self) -> Response {
        match self {
            RouteError::Api(e) => e.into_response(),
            RouteError::TooMany(wait, message) => {
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, message)
                    .retry_after(usher_http::bucket::retry_after_secs(wait))
                    .into_response()
            }
        }
    }
}

/// `429`: the client address sent status polls and leaves faster than `--ip-poll-rate`
/// allows.
pub(crate) fn too_many_polls(wait: Duration) -> RouteError {
    metrics::refused(Refusal::IpPolls);
    RouteError::TooMany(
        wait,
        "too many status polls and leaves from this address; try again after Retry-After",
    )
}

/// `429`: a binding queue's place spent its proofs here (`limits::PLACE_PROOFS`; counted
/// where refused).
pub(crate) fn too_many_proofs(wait: Duration) -> RouteError {
    RouteError::TooMany(
        wait,
        "too many requests for this place; try again after Retry-After",
    )
}

/// 404: the queue does not exist (or no longer does).
pub(crate) fn unknown_queue(q: &QueueId) -> ApiError {
    ApiError::not_found(format!("queue {q} does not exist or is closed"))
}

/// 404: the queue is closed for `reason`; a queue closed for the plain reason (or unknown)
/// gets [`unknown_queue`]'s answer, one closed for another reason says which.
pub(crate) fn closed_queue(q: &QueueId, reason: CloseReason) -> ApiError {
    match reason {
        CloseReason::QueueClosed => unknown_queue(q),
        _ => ApiError::not_found(format!("queue {q} is closed: {reason}")),
    }
}

/// 410: the ticket was valid, but its place is gone.
pub(crate) fn place_gone() -> ApiError {
    ApiError::new(
        StatusCode::GONE,
        "this place no longer exists; join again without a ticket",
    )
}

/// 503 for a request Redis could not answer (logged: the browser only learns to retry).
pub(crate) fn redis_unavailable(e: StoreError) -> ApiError {
    let e = logged(e);
    if e.is_out_of_memory() {
        return ApiError::unavailable("the waiting room is full right now; try again later");
    }
    ApiError::unavailable("redis is unavailable; try again shortly")
}

/// Out-of-memory failures of this process, logged at most once per 10 s: under `noeviction`
/// every join fails the same way, and one line says it.
static OOM_LOG: OomLog = OomLog::new(10_000);

/// Logs a failed Redis request (out of memory: counted, and logged once per period) and
/// passes the error on.
pub(crate) fn logged(e: StoreError) -> StoreError {
    metrics::redis_error();
    if e.is_out_of_memory() {
        metrics::redis_out_of_memory();
        OOM_LOG.report("a browser's request", &e);
    } else {
        tracing::warn!(error = %e, "redis request failed");
    }
    e
}
