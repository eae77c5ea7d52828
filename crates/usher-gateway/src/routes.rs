//! The browser-facing HTTP routes other than the SSE stream (which [`crate::server`] serves
//! itself): status, leave, the health checks, the metrics and the waiting-room page.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::{Json, Router};
use serde::Deserialize;
use usher_core::challenge::Challenge;
use usher_core::messages::{eta_seconds, CloseReason, ScheduledEvent, WaitingEvent};
use usher_core::store::{LeaveOutcome, PlaceState};
use usher_core::time::now_ms;
use usher_http::ApiError;

use crate::errors::{
    check_ticket, closed_queue, parse_queue, place_gone, redis_unavailable, unknown_queue,
};
use crate::gateway::Gateway;
use crate::metrics;
use crate::page::Page;
use crate::update::{admitted_event, Update};

/// Every route but `GET /api/queues/{queue}/stream`.
pub(crate) fn router(gw: Arc<Gateway>, page: Arc<Page>) -> Router {
    let ready_gw = gw.clone();
    let scraped_gw = gw.clone();
    let page = crate::page::routes(gw.clone(), page);
    Router::new()
        .route("/api/queues/{queue}/status", get(status_handler))
        .route(
            "/api/queues/{queue}/tickets/{ticket}",
            delete(leave_handler),
        )
        .route("/api/queues/{queue}/draw", get(draw_handler))
        .route("/api/queues/{queue}/challenge", get(challenge_handler))
        .merge(usher_http::health_routes(move |verbose| {
            let gw = ready_gw.clone();
            async move {
                // Ready unless draining: with Redis away, streams still get `200` + `retry:`.
                let draining = gw.shutting_down();
                let details = if verbose {
                    serde_json::json!({ "draining": draining, "redis": redis_health(&gw).await })
                } else {
                    serde_json::Value::Null
                };
                usher_http::Readiness {
                    ready: !draining,
                    details,
                }
            }
        }))
        .merge(usher_http::metrics::metrics_routes(move || {
            metrics::connections(
                scraped_gw.open_sockets(),
                scraped_gw.connections(),
                scraped_gw.shutting_down(),
            )
        }))
        .with_state(gw)
        .merge(page)
        // The router's own 404 and 405, and extractor rejections, answer JSON too (after the
        // merge, so the merged router's fallback is covered).
        .layer(axum::middleware::from_fn(usher_http::json_errors))
}

/// `GET /api/queues/{queue}/draw`: a scheduled sale's public draw record.
async fn draw_handler(
    State(gw): State<Arc<Gateway>>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let q = parse_queue(&raw)?;
    crate::draw::record(gw.store(), gw.draws(), q).await
}

/// `GET /api/queues/{queue}/challenge`: a fresh proof-of-work puzzle for a queue that asks
/// one (`404` for an unknown queue, `409` for a queue that asks none).
async fn challenge_handler(
    State(gw): State<Arc<Gateway>>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let q = parse_queue(&raw)?;
    let setting = gw
        .challenges()
        .setting(gw.store(), &q)
        .await
        .map_err(redis_unavailable)?
        .ok_or_else(|| unknown_queue(&q))?;
    if setting.challenge != Challenge::Pow {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("queue {q} asks no proof of work: join without one"),
        ));
    }
    let puzzle = gw.challenges().issue(&q, setting.difficulty, None);
    Ok(([("cache-control", "no-store")], Json(puzzle)).into_response())
}

#[derive(Debug, Deserialize)]
struct TicketQuery {
    ticket: Option<String>,
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
    let place = check_ticket(gw.ticket_key(), &q, &ticket)?;
    let state = gw
        .store()
        .status(&q, place, now_ms())
        .await
        .map_err(redis_unavailable)?;
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
        PlaceState::AdmissionPending | PlaceState::AdmittedNow { .. } => {
            serde_json::json!({"queue": q, "state": "admitting"})
        }
        PlaceState::Scheduled { opens_at_ms, .. } => {
            let mut v =
                serde_json::to_value(ScheduledEvent::new(q, opens_at_ms)).unwrap_or_default();
            v["state"] = "scheduled".into();
            v
        }
        PlaceState::QueueClosed(reason) => return Err(closed_queue(&q, reason)),
        PlaceState::Gone => return Err(place_gone()),
        PlaceState::SessionEnded => serde_json::json!({
            "queue": q, "state": "closed", "reason": CloseReason::SessionEnded,
        }),
    };
    Ok(([("cache-control", "no-store")], Json(body)).into_response())
}

/// `DELETE /api/queues/{queue}/tickets/{ticket}`
async fn leave_handler(
    State(gw): State<Arc<Gateway>>,
    Path((raw, ticket)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let q = parse_queue(&raw)?;
    let place = check_ticket(gw.ticket_key(), &q, &ticket)?;
    let store = gw.store();
    if store
        .queue_config(&q)
        .await
        .map_err(redis_unavailable)?
        .is_none()
    {
        return Err(unknown_queue(&q));
    }
    match store.leave(&q, place).await.map_err(redis_unavailable)? {
        LeaveOutcome::Left { gateway, place } => {
            metrics::left();
            match gateway {
                Some(h) if h != gw.index() => {
                    gw.tell_gateway(h, &q, place, CloseReason::Left).await
                }
                _ => {
                    gw.hub()
                        .finish(&q, place, Update::closed(&q, CloseReason::Left));
                }
            }
            tracing::debug!(queue = %q, %place, "left the line");
        }
        LeaveOutcome::Released => tracing::debug!(queue = %q, %place, "admitted session released"),
        LeaveOutcome::NotFound => {}
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `"ok"` when Redis answers a ping, `"unreachable"` otherwise (for `/readyz?verbose`).
async fn redis_health(gw: &crate::gateway::Gateway) -> &'static str {
    if gw.store().ping().await.is_ok() {
        "ok"
    } else {
        "unreachable"
    }
}
