//! The browser-facing HTTP contract.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::{Json, Router};
use futures::stream::{self, Stream, StreamExt};
use rand::Rng;
use serde::Deserialize;
use tokio::sync::watch;
use usher_core::ids::{PlaceId, QueueId};
use usher_core::messages::{eta_seconds, Admission, AdmittedEvent, StreamMessage, WaitingEvent};
use usher_core::store::{LeaveOutcome, PlaceState, StoreError};
use usher_core::ticket::{Ticket, TicketError};
use usher_core::time::now_ms;
use usher_http::ApiError;

use crate::hub::{Attached, Reservation, Update};
use crate::Gateway;

pub fn router(gw: Arc<Gateway>) -> Router {
    let ready_gw = gw.clone();
    Router::new()
        .route("/api/queues/{queue}/stream", get(stream_handler))
        .route("/api/queues/{queue}/status", get(status_handler))
        .route(
            "/api/queues/{queue}/tickets/{ticket}",
            delete(leave_handler),
        )
        .merge(usher_http::health_routes(move || {
            let gw = ready_gw.clone();
            async move { gw.store.ping().await.is_ok() }
        }))
        .with_state(gw)
}

#[derive(Debug, Deserialize)]
pub struct TicketQuery {
    ticket: Option<String>,
}

fn parse_queue(raw: &str) -> Result<QueueId, ApiError> {
    QueueId::new(raw).map_err(|e| ApiError::bad_request(e.to_string()))
}

fn check_ticket(gw: &Gateway, q: &QueueId, ticket: &str) -> Result<PlaceId, ApiError> {
    Ticket::verify(&gw.ticket_key, q, ticket).map_err(|e| match e {
        TicketError::Malformed | TicketError::BadSignature | TicketError::WrongQueue => {
            ApiError::bad_request(e.to_string())
        }
    })
}

fn unknown_queue(q: &QueueId) -> ApiError {
    ApiError::not_found(format!("queue {q} does not exist or is closed"))
}

fn place_gone() -> ApiError {
    ApiError::new(
        StatusCode::GONE,
        "this place no longer exists; join again without a ticket",
    )
}

fn logged(e: StoreError) -> StoreError {
    tracing::warn!(error = %e, "redis request failed");
    e
}

/// `retry:` delay with ±50% jitter, so reconnecting browsers spread out.
fn jittered(ms: u64) -> Duration {
    let f: f64 = rand::thread_rng().gen_range(0.5..1.5);
    Duration::from_millis((ms as f64 * f) as u64)
}

type EventStream = std::pin::Pin<Box<dyn Stream<Item = Result<Event, Infallible>> + Send>>;

fn sse_response(gw: &Gateway, events: EventStream) -> Response {
    let mut r = Sse::new(events)
        .keep_alive(
            KeepAlive::new()
                .interval(gw.config.keepalive())
                .text("keepalive"),
        )
        .into_response();
    let h = r.headers_mut();
    h.insert("cache-control", HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}

/// `200` with only a jittered `retry:`, then the end: the browser tries again shortly
/// (a non-200 answer would make `EventSource` give up for good).
fn try_again_later(gw: &Gateway) -> Response {
    let retry = Event::default().retry(jittered(gw.config.retry_ms));
    sse_response(gw, Box::pin(stream::iter([Ok(retry)])))
}

fn json_event(name: &str, ticket: Option<&str>, data: &impl serde::Serialize) -> Event {
    let ev = Event::default().event(name);
    let ev = match ticket {
        Some(t) => ev.id(t),
        None => ev,
    };
    ev.json_data(data)
        .unwrap_or_else(|_| Event::default().comment("unserialisable event"))
}

fn admitted_event(q: &QueueId, rec: &usher_core::store::TokenRecord) -> AdmittedEvent {
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

/// A place reserved for a connection being set up. Dropped before [`Reserved::attach`] (the
/// request was cancelled, or failed on Redis), it marks the place away, so the browser can
/// come back within the grace period and a vanished one costs no admission.
struct Reserved {
    gw: Arc<Gateway>,
    r: Option<Reservation>,
}

impl Reserved {
    fn new(gw: &Arc<Gateway>, q: &QueueId, place: PlaceId) -> Self {
        Self {
            gw: gw.clone(),
            r: Some(gw.hub.reserve(q, place)),
        }
    }

    /// Gives the reservation up without touching Redis (the place is admitted or gone).
    fn disarm(mut self) {
        if let Some(r) = self.r.take() {
            self.gw.hub.unreserve(&r);
        }
    }

    fn attach(mut self, first: WaitingEvent) -> Option<(Attached, watch::Receiver<Update>)> {
        let r = self.r.take()?;
        self.gw.hub.attach(r, first)
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if let Some(r) = self.r.take() {
            if self.gw.hub.unreserve(&r) {
                self.gw.mark_away(r.queue, r.place);
            }
        }
    }
}

/// Marks the place away when a connection that still owns it goes away.
struct Holding {
    gw: Arc<Gateway>,
    attached: Attached,
}

impl Drop for Holding {
    fn drop(&mut self) {
        if self.gw.hub.detach(&self.attached) {
            self.gw
                .mark_away(self.attached.queue.clone(), self.attached.place);
        }
    }
}

struct Live {
    rx: watch::Receiver<Update>,
    ticket: String,
    first: bool,
    done: bool,
    _holding: Holding,
}

/// The SSE event for an update; `None` for an `Ended` without a retry.
fn update_event(u: &Update, ticket: &str) -> Option<Event> {
    match u {
        Update::Waiting(w) => Some(json_event("waiting", Some(ticket), w)),
        Update::Admitted(a) => Some(json_event("admitted", Some(ticket), a)),
        Update::Closed(c) => Some(json_event("closed", None, c)),
        Update::Ended { retry_ms: Some(ms) } => {
            Some(Event::default().retry(Duration::from_millis(*ms)))
        }
        Update::Ended { retry_ms: None } => None,
    }
}

fn live_stream(
    gw: &Arc<Gateway>,
    ticket: String,
    attached: Attached,
    rx: watch::Receiver<Update>,
) -> EventStream {
    let retry = Event::default().retry(Duration::from_millis(gw.config.retry_ms));
    let state = Live {
        rx,
        ticket,
        first: true,
        done: false,
        _holding: Holding {
            gw: gw.clone(),
            attached,
        },
    };
    let updates = stream::unfold(state, |mut st| async move {
        if st.done {
            return None;
        }
        let update = if st.first {
            st.first = false;
            st.rx.borrow_and_update().clone()
        } else {
            match st.rx.changed().await {
                Ok(()) => st.rx.borrow_and_update().clone(),
                Err(_) => Update::superseded(),
            }
        };
        st.done = update.is_terminal();
        update_event(&update, &st.ticket).map(|ev| (Ok(ev), st))
    });
    Box::pin(stream::iter([Ok(retry)]).chain(updates))
}

fn once_stream(gw: &Gateway, ev: Event) -> EventStream {
    let retry = Event::default().retry(Duration::from_millis(gw.config.retry_ms));
    Box::pin(stream::iter([Ok(retry), Ok(ev)]))
}

/// `GET /api/queues/{queue}/stream`
async fn stream_handler(
    State(gw): State<Arc<Gateway>>,
    Path(raw): Path<String>,
    query: Result<Query<TicketQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let q = parse_queue(&raw)?;
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let last_event_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .filter(|s| !s.is_empty());
    let ticket = last_event_id.or(query.ticket.as_deref());
    let place = ticket.map(|t| check_ticket(&gw, &q, t)).transpose()?;
    if gw.shutting_down() || gw.hub.connections() >= gw.config.max_connections {
        return Ok(try_again_later(&gw));
    }
    // Set the connection up in its own task: if the browser goes away mid-request, the task
    // still finishes, and the place it took or resumed is marked away rather than leaked.
    let ticket = ticket.map(str::to_owned);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let setup_gw = gw.clone();
    tokio::spawn(async move {
        let r = setup(&setup_gw, q, place, ticket).await;
        let _ = tx.send(r);
    });
    rx.await.unwrap_or_else(|_| Ok(try_again_later(&gw)))
}

async fn setup(
    gw: &Arc<Gateway>,
    q: QueueId,
    place: Option<PlaceId>,
    ticket: Option<String>,
) -> Result<Response, ApiError> {
    let idx = gw.index();
    let (state, reserved) = match place {
        Some(place) => {
            // Reserve first: from now on an older connection's disconnect cannot mark the
            // place away while it is being resumed.
            let reserved = Reserved::new(gw, &q, place);
            match resume(gw, &q, place, idx).await {
                Ok(s) => (s, Some(reserved)),
                Err(_) => return Ok(try_again_later(gw)),
            }
        }
        None => match gw.store.join(&q, idx, now_ms()).await.map_err(logged) {
            Ok(s) => {
                let reserved = match &s {
                    PlaceState::Waiting { place, .. } => Some(Reserved::new(gw, &q, *place)),
                    _ => None,
                };
                (s, reserved)
            }
            Err(_) => return Ok(try_again_later(gw)),
        },
    };
    let disarm = |r: Option<Reserved>| {
        if let Some(r) = r {
            r.disarm();
        }
    };
    match state {
        PlaceState::Waiting {
            place,
            position,
            waiting,
            rate,
            previous_gateway,
        } => {
            let Some(reserved) = reserved else {
                return Ok(try_again_later(gw));
            };
            let ticket = Ticket::issue(&gw.ticket_key, &q, place);
            let first = WaitingEvent {
                queue: q.clone(),
                position,
                waiting,
                eta_seconds: eta_seconds(position, rate),
                as_of_ms: now_ms(),
            };
            let Some((attached, rx)) = reserved.attach(first) else {
                // A newer connection took the place over meanwhile.
                return Ok(try_again_later(gw));
            };
            if let Some(holder) = previous_gateway.filter(|h| *h != idx) {
                let (gw, q) = (gw.clone(), q.clone());
                tokio::spawn(async move {
                    gw.tell_gateway(holder, &q, place, "resumed_elsewhere")
                        .await;
                });
            }
            Ok(sse_response(gw, live_stream(gw, ticket, attached, rx)))
        }
        PlaceState::Admitted(rec) => {
            disarm(reserved);
            let ticket = ticket.unwrap_or_default();
            let ev = json_event("admitted", Some(&ticket), &admitted_event(&q, &rec));
            Ok(sse_response(gw, once_stream(gw, ev)))
        }
        PlaceState::AdmissionPending => {
            disarm(reserved);
            Ok(try_again_later(gw))
        }
        PlaceState::QueueClosed => {
            disarm(reserved);
            Err(unknown_queue(&q))
        }
        PlaceState::Gone => {
            disarm(reserved);
            Err(place_gone())
        }
    }
}

/// Resumes a place; an admission whose token is still being minted is awaited briefly.
async fn resume(
    gw: &Gateway,
    q: &QueueId,
    place: PlaceId,
    idx: u16,
) -> Result<PlaceState, StoreError> {
    for _ in 0..20 {
        let s = gw
            .store
            .resume(q, place, idx, now_ms())
            .await
            .map_err(logged)?;
        if s != PlaceState::AdmissionPending {
            return Ok(s);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(PlaceState::AdmissionPending)
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

/// A snapshot no longer lists a place this gateway holds: ask Redis what became of it, so a
/// lost `admitted` (or `closed`) message never leaves a browser waiting.
async fn resync(gw: Arc<Gateway>, q: QueueId, place: PlaceId) {
    let update = match gw.store.status(&q, place, now_ms()).await {
        Ok(PlaceState::Admitted(rec)) => Some(Update::Admitted(admitted_event(&q, &rec))),
        Ok(PlaceState::QueueClosed) => Some(Update::Closed(usher_core::messages::ClosedEvent {
            queue: q.clone(),
            reason: "queue_closed".into(),
        })),
        Ok(PlaceState::Gone) => Some(Update::Closed(usher_core::messages::ClosedEvent {
            queue: q.clone(),
            reason: "place_lost".into(),
        })),
        Ok(PlaceState::Waiting { .. } | PlaceState::AdmissionPending) => None,
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
