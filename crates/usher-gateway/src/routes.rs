//! The browser-facing HTTP routes other than the SSE stream (which [`crate::server`] serves
//! itself): status, leave, the health checks, the metrics and the waiting-room page.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use usher_core::binding::ProofRefusal;
use usher_core::challenge::Challenge;
use usher_core::ids::{PlaceId, QueueId};
use usher_core::messages::{eta_seconds, AdmittedEvent, CloseReason, ScheduledEvent, WaitingEvent};
use usher_core::store::{LeaveOutcome, PlaceState};
use usher_core::time::now_ms;
use usher_http::openapi::ErrorBody;
use usher_http::ApiError;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::binding::{asker, prove, Proven, Route, Unproven};
use crate::client::IpKey;
use crate::errors::{
    check_ticket, closed_queue, parse_queue, place_gone, redis_unavailable, too_many_polls,
    too_many_proofs, unknown_queue, RouteError,
};
use crate::metrics::{self, Refusal};
use crate::shared::Gateway;
use crate::update::{admitted_event, Update};
use crate::waiting_room::Page;

/// Every route but `GET /api/queues/{queue}/stream`, from one table that also describes them
/// (`GET /openapi.json`, whose frame [`crate::openapi::ApiDoc`] describes the stream): a
/// route is added with `.routes(routes!(handler))` for a handler annotated with
/// `#[utoipa::path]`.
pub(crate) fn router(gw: Arc<Gateway>, page: Arc<Page>) -> Router {
    let ready_gw = gw.clone();
    let scraped_gw = gw.clone();
    let page = crate::waiting_room::routes(gw.clone(), page);
    let table = OpenApiRouter::with_openapi(<crate::openapi::ApiDoc as utoipa::OpenApi>::openapi())
        .routes(routes!(status_handler))
        .routes(routes!(leave_handler))
        .routes(routes!(draw_handler))
        .routes(routes!(challenge_handler))
        .routes(routes!(crate::invitation::invitation_handler))
        .merge(usher_http::health_routes(move |verbose| {
            let gw = ready_gw.clone();
            async move {
                // Ready unless draining: with Redis away, streams still get `200` + `retry:`.
                let draining = gw.shutting_down();
                let details = if verbose {
                    serde_json::json!({ "draining": draining, "redis": redis_health(&gw).await, "door": gw.door().report() })
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
            metrics::doors_open(scraped_gw.door().open_count());
            metrics::connections(
                scraped_gw.open_sockets(),
                scraped_gw.connections(),
                scraped_gw.shutting_down(),
            )
        }))
        .with_state(gw)
        .merge(page);
    let (router, _doc) = usher_http::openapi::finish(table);
    router
        // The router's own 404 and 405, and extractor rejections, answer JSON too (after the
        // merge, so the merged router's fallback is covered).
        .layer(axum::middleware::from_fn(usher_http::json_errors))
}

/// `GET /api/queues/{queue}/draw`: a scheduled sale's public draw record.
#[utoipa::path(
    get,
    path = "/api/queues/{queue}/draw",
    tag = "draw",
    params(("queue" = QueueId, Path, description = "The queue id.")),
    responses(
        (status = 200, description = "The draw record: `status` is `pending`, `done` or `void`; `seed` and `entrants` are `null` until the draw; `voided` names a commitment voided by a Redis data loss (`Cache-Control: no-cache`; a finished draw's record: `public, max-age=60`).", body = crate::draw::DrawRecord<'_>),
        (status = 400, description = "A malformed queue id.", body = ErrorBody),
        (status = 404, description = "Unknown queue, or one without a scheduled sale.", body = ErrorBody),
        (status = 503, description = "Redis is unreachable.", body = ErrorBody),
    ),
)]
async fn draw_handler(
    State(gw): State<Arc<Gateway>>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let q = parse_queue(&raw)?;
    crate::draw::record(gw.store(), gw.draws(), q).await
}

/// `GET /api/queues/{queue}/challenge`: a fresh proof-of-work puzzle for a queue that asks
/// one (`404` for an unknown queue, `409` for a queue that asks none).
#[utoipa::path(
    get,
    path = "/api/queues/{queue}/challenge",
    tag = "browsers",
    params(("queue" = QueueId, Path, description = "The queue id.")),
    responses(
        (status = 200, description = "A fresh proof-of-work puzzle, good at every gateway until `expires_at` (`Cache-Control: no-store`); `reason` is absent. Join with `?pow=<puzzle>.<nonce>`.", body = usher_core::challenge::ChallengeEvent),
        (status = 400, description = "A malformed queue id.", body = ErrorBody),
        (status = 404, description = "Unknown queue.", body = ErrorBody),
        (status = 409, description = "The queue asks no proof of work: join without one.", body = ErrorBody),
        (status = 503, description = "Redis is unreachable.", body = ErrorBody),
    ),
)]
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
struct ProofQuery {
    /// A binding queue's proof of the browser key (`htm` `DELETE`, `htu`: this route's path).
    proof: Option<String>,
}

#[derive(Debug, Deserialize)]
struct TicketQuery {
    ticket: Option<String>,
    /// A binding queue's proof of the browser key (`htu`: this route's path).
    proof: Option<String>,
}

/// `GET /api/queues/{queue}/status` answer: where a place stands, as the stream's events say
/// it, with `state` naming which.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(tag = "state", rename_all = "snake_case")]
pub(crate) enum PlaceStatus {
    /// The `waiting` event's payload.
    Waiting(WaitingEvent),
    /// The `admitted` event's payload (the same token on every poll while the session is
    /// active).
    Admitted(AdmittedEvent),
    /// Between admission and token, an instant: poll again.
    Admitting { queue: QueueId },
    /// The `scheduled` event's payload.
    Scheduled(ScheduledEvent),
    /// The place was admitted and its session has ended (`reason`: `session_ended`).
    Closed { queue: QueueId, reason: CloseReason },
}

/// `GET /api/queues/{queue}/status?ticket=…`
#[utoipa::path(
    get,
    path = "/api/queues/{queue}/status",
    tag = "browsers",
    params(
        ("queue" = QueueId, Path, description = "The queue id."),
        ("ticket" = crate::openapi::Ticket, Query, description = "The place's ticket."),
        ("proof" = Option<String>, Query, description = "On a queue with `bind: \"browser_key\"`: a fresh proof of possession of the key the place joined with (ES256 compact JWS, `htu` = this route's path; docs/security.md). Required there, ignored elsewhere."),
    ),
    responses(
        (status = 200, description = "Where the place stands (`Cache-Control: no-store`), for clients that poll.", body = PlaceStatus),
        (status = 400, description = "A malformed queue id, a missing, forged or foreign ticket.", body = ErrorBody),
        (status = 403, description = "A queue with `bind: \"browser_key\"` and no good proof of the place's key (the error names why: `proof_required: missing`, `invalid`, `expired`, `replayed`, `wrong_key`): a copied ticket tells nothing, and the entry token is never handed out again without the key.", body = ErrorBody),
        (status = 404, description = "Unknown or closed queue (the error names a reason other than `queue_closed`).", body = ErrorBody),
        (status = 410, description = "The place no longer exists.", body = ErrorBody),
        (status = 429, description = "Too many requests, with `Retry-After` (seconds): this client address sent status polls and leaves faster than the gateway's `USHER_IP_POLL_RATE` (after a burst of `USHER_IP_POLL_BURST`; nothing else about the request was looked at), or, on a queue with `bind: \"browser_key\"`, the place spent its proofs on this gateway (30 at once, then one a second).", body = ErrorBody),
        (status = 503, description = "Redis is unreachable.", body = ErrorBody),
    ),
)]
async fn status_handler(
    State(gw): State<Arc<Gateway>>,
    Extension(client): Extension<IpKey>,
    Path(raw): Path<String>,
    query: Result<Query<TicketQuery>, QueryRejection>,
) -> Result<Response, RouteError> {
    // The address's rate first: a refused poll costs no Redis call and no signature check.
    gw.ip_limits().poll(client).map_err(too_many_polls)?;
    let q = parse_queue(&raw)?;
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let ticket = query
        .ticket
        .ok_or_else(|| ApiError::bad_request("the ticket query parameter is required"))?;
    let place = check_ticket(gw.ticket_key(), &q, &ticket)?;
    let proven = proven(&gw, &q, place, query.proof.as_deref(), Route::Status).await?;
    let state = gw
        .store()
        .status_as(&q, place, now_ms(), asker(proven.as_ref()))
        .await
        .map_err(redis_unavailable)?;
    let body = match state {
        PlaceState::Waiting {
            position,
            waiting,
            rate,
            lane,
            ..
        } => PlaceStatus::Waiting(WaitingEvent {
            queue: q,
            position,
            waiting,
            eta_seconds: eta_seconds(position, rate),
            as_of_ms: now_ms(),
            // The stream's next `state` tells the inventory; a poll does without it.
            inventory: None,
            lane,
        }),
        PlaceState::Admitted(rec) => PlaceStatus::Admitted(admitted_event(&q, &rec)),
        PlaceState::AdmissionPending | PlaceState::AdmittedNow { .. } => {
            PlaceStatus::Admitting { queue: q }
        }
        PlaceState::Scheduled { opens_at_ms, .. } => {
            PlaceStatus::Scheduled(ScheduledEvent::new(q, opens_at_ms))
        }
        PlaceState::QueueClosed(reason) => return Err(closed_queue(&q, reason).into()),
        // The script's own key check (after a data loss or restore the gateway's may be
        // stale): the same answer as the gateway's.
        PlaceState::WrongKey => return Err(wrong_key(&q).into()),
        // Only a join is answered "full"; a ticket names a place that was taken.
        PlaceState::Gone | PlaceState::PreQueueFull { .. } => return Err(place_gone().into()),
        PlaceState::SessionEnded => PlaceStatus::Closed {
            queue: q,
            reason: CloseReason::SessionEnded,
        },
    };
    Ok(([("cache-control", "no-store")], Json(body)).into_response())
}

/// A binding queue's request for `place` proves the place's key (other queues: always `Ok`,
/// proving nothing); `403` naming the reason otherwise, `429` when the place spent its proofs
/// here. What it proved goes to the place's script, which checks it again ([`asker`]).
async fn proven(
    gw: &Gateway,
    q: &QueueId,
    place: PlaceId,
    proof: Option<&str>,
    route: Route<'_>,
) -> Result<Option<Proven>, RouteError> {
    match prove(gw, q, Some(place), proof, route, None).await {
        Ok(p) => Ok(p),
        Err(Unproven::Refused(reason)) => Err(proof_required(reason).into()),
        Err(Unproven::Throttled(wait)) => Err(too_many_proofs(wait)),
        Err(Unproven::Store(e)) => Err(redis_unavailable(e).into()),
    }
}

/// `403 proof_required: wrong_key` from the place's script (counted as a refused proof).
fn wrong_key(q: &QueueId) -> ApiError {
    metrics::refused(Refusal::Proof);
    tracing::debug!(queue = %q, "request refused by the place's script: not the place's key");
    proof_required(ProofRefusal::WrongKey)
}

/// `403`: no good proof of the place's key.
fn proof_required(reason: ProofRefusal) -> ApiError {
    let why = serde_json::to_value(reason)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    ApiError::new(
        StatusCode::FORBIDDEN,
        format!("proof_required: {why} (this queue binds places to the browser's key)"),
    )
}

/// `DELETE /api/queues/{queue}/tickets/{ticket}`
#[utoipa::path(
    delete,
    path = "/api/queues/{queue}/tickets/{ticket}",
    tag = "browsers",
    params(
        ("queue" = QueueId, Path, description = "The queue id."),
        ("ticket" = crate::openapi::Ticket, Path, description = "The place's ticket."),
        ("proof" = Option<String>, Query, description = "On a queue with `bind: \"browser_key\"`: a fresh proof of possession of the key the place joined with (`htm` `DELETE`, `htu` this route's path with the ticket; docs/security.md). Required there, ignored elsewhere."),
    ),
    responses(
        (status = 204, description = "Left the line (idempotent): everyone behind moves up, and the place's stream ends with `closed` `left`. An admitted ticket gives up its session (it ends like a release)."),
        (status = 400, description = "A malformed queue id, a forged or foreign ticket.", body = ErrorBody),
        (status = 403, description = "A queue with `bind: \"browser_key\"` and no good proof of the place's key (`proof_required: <reason>`): a copied ticket cannot make its owner leave.", body = ErrorBody),
        (status = 404, description = "Unknown queue.", body = ErrorBody),
        (status = 429, description = "Too many requests, with `Retry-After` (seconds): this client address sent status polls and leaves faster than the gateway's `USHER_IP_POLL_RATE` (after a burst of `USHER_IP_POLL_BURST`; nothing else about the request was looked at), or, on a queue with `bind: \"browser_key\"`, the place spent its proofs on this gateway (30 at once, then one a second).", body = ErrorBody),
        (status = 503, description = "Redis is unreachable.", body = ErrorBody),
    ),
)]
async fn leave_handler(
    State(gw): State<Arc<Gateway>>,
    Extension(client): Extension<IpKey>,
    Path((raw, ticket)): Path<(String, String)>,
    query: Result<Query<ProofQuery>, QueryRejection>,
) -> Result<StatusCode, RouteError> {
    // As for status: the rate before anything else.
    gw.ip_limits().poll(client).map_err(too_many_polls)?;
    let q = parse_queue(&raw)?;
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let place = check_ticket(gw.ticket_key(), &q, &ticket)?;
    let proven = proven(
        &gw,
        &q,
        place,
        query.proof.as_deref(),
        Route::Leave(&ticket),
    )
    .await?;
    let store = gw.store();
    if store
        .queue_config(&q)
        .await
        .map_err(redis_unavailable)?
        .is_none()
    {
        return Err(unknown_queue(&q).into());
    }
    match store
        .leave_as(&q, place, asker(proven.as_ref()))
        .await
        .map_err(redis_unavailable)?
    {
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
        LeaveOutcome::WrongKey => return Err(wrong_key(&q).into()),
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `"ok"` when Redis answers a ping, `"unreachable"` otherwise (for `/readyz?verbose`).
async fn redis_health(gw: &crate::shared::Gateway) -> &'static str {
    if gw.store().ping().await.is_ok() {
        "ok"
    } else {
        "unreachable"
    }
}
