//! The browser-facing HTTP contract except the SSE stream itself (see [`crate::stream`]), and
//! what stream messages do to the browsers held here.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::delete;
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use usher_core::ids::{PlaceId, QueueId};
use usher_core::messages::{eta_seconds, Admission, AdmittedEvent, StreamMessage, WaitingEvent};
use usher_core::store::{LeaveOutcome, PlaceState, StoreError};
use usher_core::ticket::Ticket;
use usher_core::time::now_ms;
use usher_http::ApiError;

use crate::hub::{Admitted, Update};
use crate::Gateway;

/// Every route but `GET /api/queues/{queue}/stream`, which [`crate::server`] serves itself.
pub fn router(gw: Arc<Gateway>) -> Router {
    let ready_gw = gw.clone();
    Router::new()
        .route("/api/queues/{queue}/status", get(status_handler))
        .route(
            "/api/queues/{queue}/tickets/{ticket}",
            delete(leave_handler),
        )
        .merge(usher_http::health_routes(move || {
            let gw = ready_gw.clone();
            async move { !gw.shutting_down() && gw.store.ping().await.is_ok() }
        }))
        .with_state(gw)
}

#[derive(Debug, Deserialize)]
struct TicketQuery {
    ticket: Option<String>,
}

pub(crate) fn parse_queue(raw: &str) -> Result<QueueId, ApiError> {
    QueueId::new(raw).map_err(|e| ApiError::bad_request(e.to_string()))
}

pub(crate) fn check_ticket(gw: &Gateway, q: &QueueId, ticket: &str) -> Result<PlaceId, ApiError> {
    // Malformed, forged, or another queue's: all 400.
    Ticket::verify(&gw.ticket_key, q, ticket).map_err(|e| ApiError::bad_request(e.to_string()))
}

pub(crate) fn unknown_queue(q: &QueueId) -> ApiError {
    ApiError::not_found(format!("queue {q} does not exist or is closed"))
}

pub(crate) fn place_gone() -> ApiError {
    ApiError::new(
        StatusCode::GONE,
        "this place no longer exists; join again without a ticket",
    )
}

pub(crate) fn logged(e: StoreError) -> StoreError {
    tracing::warn!(error = %e, "redis request failed");
    e
}

pub(crate) fn admitted_event(q: &QueueId, rec: &usher_core::store::TokenRecord) -> AdmittedEvent {
    AdmittedEvent::new(
        q.clone(),
        &Admission {
            place: PlaceId(0),
            token: rec.token.clone(),
            admitted_at_ms: rec.admitted_at_ms,
            expires_at_ms: rec.expires_at_ms,
        },
    )
}

/// `GET /api/queues/{queue}/status?ticket=…`
async fn status_handler(
    State(gw): State<Arc<Gateway>>,
    Path(raw): Path<String>,
    query: Result<Query<TicketQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = parse_queue(&raw)?;
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let ticket = query
        .ticket
        .ok_or_else(|| ApiError::bad_request("the ticket query parameter is required"))?;
    let place = check_ticket(&gw, &q, &ticket)?;
    let state = gw.store.status(&q, place, now_ms()).await.map_err(|e| {
        logged(e);
        ApiError::unavailable("redis is unavailable; try again shortly")
    })?;
    let body = match state {
        PlaceState::Waiting {
            position,
            waiting,
            rate,
            ..
        } => {
            let mut v = serde_json::to_value(WaitingEvent {
                queue: q,
                position,
                waiting,
                eta_seconds: eta_seconds(position, rate),
                as_of_ms: now_ms(),
            })
            .unwrap_or_default();
            v["state"] = "waiting".into();
            v
        }
        PlaceState::Admitted(rec) => {
            let mut v = serde_json::to_value(admitted_event(&q, &rec)).unwrap_or_default();
            v["state"] = "admitted".into();
            v
        }
        PlaceState::AdmissionPending => serde_json::json!({"queue": q, "state": "admitting"}),
        PlaceState::QueueClosed => return Err(unknown_queue(&q)),
        PlaceState::Gone => return Err(place_gone()),
    };
    Ok(([("cache-control", "no-store")], Json(body)).into_response())
}

/// `DELETE /api/queues/{queue}/tickets/{ticket}`
async fn leave_handler(
    State(gw): State<Arc<Gateway>>,
    Path((raw, ticket)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let q = parse_queue(&raw)?;
    let place = check_ticket(&gw, &q, &ticket)?;
    let unavailable = |e: StoreError| {
        logged(e);
        ApiError::unavailable("redis is unavailable; try again shortly")
    };
    if gw
        .store
        .queue_config(&q)
        .await
        .map_err(unavailable)?
        .is_none()
    {
        return Err(unknown_queue(&q));
    }
    match gw.store.leave(&q, place).await.map_err(unavailable)? {
        LeaveOutcome::Left { gateway } => {
            match gateway {
                Some(h) if h != gw.index() => gw.tell_gateway(h, &q, place, "left").await,
                _ => {
                    gw.hub.finish(&q, place, left_update(&q));
                }
            }
            tracing::debug!(queue = %q, %place, "left the line");
        }
        LeaveOutcome::Released => tracing::debug!(queue = %q, %place, "admitted session released"),
        LeaveOutcome::NotFound => {}
    }
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) fn left_update(q: &QueueId) -> Update {
    Update::Closed(usher_core::messages::ClosedEvent {
        queue: q.clone(),
        reason: "left".into(),
    })
}

/// What a message from this gateway's stream does to the browsers held here.
pub(crate) fn apply(gw: &Arc<Gateway>, m: StreamMessage) {
    match m {
        StreamMessage::State(s) => {
            for place in gw.hub.apply_state(&s) {
                tokio::spawn(resync(gw.clone(), s.queue.clone(), place));
            }
        }
        StreamMessage::Admitted { queue, items } => {
            gw.hub.admit(&queue, &items);
        }
        StreamMessage::Staged { queue, items } => gw.hub.stage(&queue, items),
        StreamMessage::AdmittedStaged {
            queue,
            admitted_at_ms,
            expires_at_ms,
            places,
        } => {
            let missing = gw
                .hub
                .admit_staged(&queue, admitted_at_ms, expires_at_ms, &places);
            if !missing.is_empty() {
                tokio::spawn(fetch_admissions(gw.clone(), queue, missing));
            }
        }
        StreamMessage::Closed { queue, reason } => {
            gw.hub.close_queue(&queue, &reason);
        }
        StreamMessage::Ended {
            queue,
            place,
            reason,
        } => {
            let update = if reason == "left" {
                left_update(&queue)
            } else {
                Update::superseded()
            };
            gw.hub.finish(&queue, place, update);
        }
    }
}

/// Admissions this gateway was told of without their tokens (the staged tokens were over the
/// cap, expired, or their message was lost): read from Redis, waiting briefly while the
/// dispatcher stores them.
async fn fetch_admissions(gw: Arc<Gateway>, q: QueueId, places: Vec<PlaceId>) {
    use futures::StreamExt;
    tracing::debug!(queue = %q, n = places.len(), "admissions without a staged token; reading them from redis");
    futures::stream::iter(places)
        .for_each_concurrent(FETCH_CONCURRENCY, |place| {
            let (gw, q) = (&gw, &q);
            async move {
                // The dispatcher stores the records a moment after sending the admissions.
                for _ in 0..50 {
                    match gw.store.status(q, place, now_ms()).await {
                        Ok(PlaceState::AdmissionPending) | Err(_) => {
                            tokio::time::sleep(Duration::from_millis(100)).await
                        }
                        Ok(s) => {
                            if let Some(u) = settled(q, s) {
                                gw.hub.finish(q, place, u);
                            }
                            return;
                        }
                    }
                }
            }
        })
        .await;
}

/// Redis reads in flight at once for admissions fetched without a staged token.
const FETCH_CONCURRENCY: usize = 32;

/// The update for a place whose fate Redis tells: `None` while it is still waiting or its
/// admission is being stored.
fn settled(q: &QueueId, s: PlaceState) -> Option<Update> {
    match s {
        PlaceState::Admitted(rec) => Some(Update::Admitted(Admitted::new(admitted_event(q, &rec)))),
        PlaceState::QueueClosed => Some(Update::Closed(usher_core::messages::ClosedEvent {
            queue: q.clone(),
            reason: "queue_closed".into(),
        })),
        PlaceState::Gone => Some(Update::Closed(usher_core::messages::ClosedEvent {
            queue: q.clone(),
            reason: "place_lost".into(),
        })),
        PlaceState::Waiting { .. } | PlaceState::AdmissionPending => None,
    }
}

/// A snapshot no longer lists a place this gateway holds: ask Redis what became of it, so a
/// lost `admitted` (or `closed`) message never leaves a browser waiting.
async fn resync(gw: Arc<Gateway>, q: QueueId, place: PlaceId) {
    let update = match gw.store.status(&q, place, now_ms()).await {
        Ok(s) => settled(&q, s),
        Err(e) => {
            tracing::debug!(queue = %q, %place, error = %e, "resync failed; retried on the next snapshot");
            None
        }
    };
    match update {
        Some(u) => {
            tracing::debug!(queue = %q, %place, "resynchronised a place from redis");
            gw.hub.finish(&q, place, u);
        }
        None => gw.hub.resync_done(&q, place),
    }
}
