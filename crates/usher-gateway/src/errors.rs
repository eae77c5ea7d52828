//! The API errors of the browser contract, and the checks on a request's queue and ticket
//! that produce them. Shared by the stream ([`crate::server`]) and the other routes
//! ([`crate::routes`]), so the same request gets the same answer on either.

use crate::ticket::Ticket;
use crate::ticket::TicketKey;
use axum::http::StatusCode;
use usher_core::ids::{PlaceId, QueueId};
use usher_core::messages::CloseReason;
use usher_core::store::{OomLog, StoreError};
use usher_http::ApiError;

use crate::metrics;

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
