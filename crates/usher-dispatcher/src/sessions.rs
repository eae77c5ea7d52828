//! The session API for booking services, authenticated by the entry token itself
//! (`Authorization: Bearer <token>`): is the session still active, touch it, consume it,
//! release it.
//!
//! Offline verification (JWKS) says "a genuine usher token within its cap"; these routes answer
//! the online question. The token is checked against this dispatcher's own key and the queue it
//! names, then Redis says where the session stands. The token is never logged.
//!
//! Two rules make an admission worth exactly one booking at the right place:
//!
//! * **Bound to a queue.** Every route takes `?queue=Q`, the queue the booking service sells:
//!   a token of another queue is refused with `403` whatever its session's state, so a token
//!   of a quiet queue (passthrough admits at once) cannot open the busy queue's booking.
//!   (`session_trust::a_quiet_queues_token_is_refused_by_the_busy_queues_checks`)
//! * **Consumed once.** `POST /api/session/consume` ends the session and says whether this
//!   call ended it (`200`) or it had ended already (`410`); one Redis script decides, so of any
//!   number of concurrent calls exactly one gets `200`.
//!   (`session_trust::consume_ends_a_session_once_whoever_asks_at_the_same_time`)
//! * **Bound to the browser.** A token with `cnf.jkt` (a queue with `bind: "browser_key"`) is
//!   answered only with a fresh, single-use proof of that key for the request the browser
//!   made (`DPoP`, `X-Original-Method`, `X-Original-URL`; [`crate::session_proof`]), so a
//!   copied token alone neither books nor browses.
//!
//! A door token (the open door of a queue with `on_outage: "open"`, handed out by gateways
//! while Redis is unreachable) is answered first, offline: [`crate::door_session`].

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use usher_core::ids::{PlaceId, QueueId};
use usher_core::store::{SessionEnd, SessionState};
use usher_core::time::{now_ms, rfc3339_ms};
use usher_http::openapi::ErrorBody;
use usher_http::ApiError;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::session_proof::ProofHeaders;
use crate::state::{redis_down, AppState};

/// The routes, merged into the dispatcher's router.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(status, release))
        .routes(routes!(touch))
        .routes(routes!(consume))
}

/// The query of every session route.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct ForQueue {
    /// The queue the booking service sells: a token of another queue is refused with `403`.
    /// Without it, a token of any configured queue is answered (not recommended).
    queue: Option<String>,
}

/// `200` body of `GET /api/session`, `POST /api/session/touch` and
/// `POST /api/session/consume`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct SessionView {
    queue: QueueId,
    /// The session id (the token's `jti`).
    session: String,
    /// RFC 3339: when the session ends unless touched or released first (for a consume: when
    /// it would have ended; it has ended now).
    expires_at: String,
}

/// A verified entry token: its session, and its hard cap.
struct Bearer {
    queue: QueueId,
    place: PlaceId,
    session: String,
    cap_ms: u64,
}

impl Bearer {
    fn view(&self, expires_at_ms: u64) -> Json<SessionView> {
        Json(SessionView {
            queue: self.queue.clone(),
            session: self.session.clone(),
            expires_at: rfc3339_ms(expires_at_ms),
        })
    }
}

// >>> door
/// The `200` answer for a door token (`crate::door_session`), judged offline: no Redis.
fn door_answer(
    st: &AppState,
    headers: &HeaderMap,
    q: &ForQueue,
) -> Result<Option<Response>, ApiError> {
    Ok(
        crate::door_session::door_bearer(st, headers, q.queue.as_deref())?.map(|d| {
            let view = Json(SessionView {
                queue: d.queue,
                session: d.session,
                expires_at: rfc3339_ms(d.exp_ms),
            });
            ([(header::CACHE_CONTROL, "no-store")], view).into_response()
        }),
    )
}
// <<< door

fn ended_error() -> ApiError {
    ApiError::new(StatusCode::GONE, "the session has ended")
}

/// The query, or a JSON `400` (e.g. `queue` given twice).
fn for_queue(q: Result<Query<ForQueue>, QueryRejection>) -> Result<ForQueue, ApiError> {
    q.map(|Query(q)| q)
        .map_err(|e| ApiError::bad_request(e.body_text()))
}

fn other_queue() -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "the entry token admits to another queue",
    )
}

/// The bearer token's session: `401` unless this dispatcher signed it for a configured queue;
/// `403` when `for_queue` names another queue; `410` once its `exp` passed.
async fn bearer(
    st: &AppState,
    headers: &HeaderMap,
    for_queue: &ForQueue,
) -> Result<Bearer, ApiError> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| ApiError::unauthorized("Authorization: Bearer <entry token> required"))?;
    let usher_mint::token::Verified { claims, cnf } = st
        .keys
        .verify_bound(token)
        .map_err(|e| ApiError::unauthorized(format!("not an entry token: {e}")))?;
    let not_ours = || ApiError::unauthorized("the token names no session of a configured queue");
    let queue = QueueId::new(&claims.aud).map_err(|_| not_ours())?;
    let place: PlaceId = claims.sub.parse().map_err(|_| not_ours())?;
    if claims.jti != format!("{queue}.{place}") {
        return Err(not_ours());
    }
    if st
        .store
        .queue_config(&queue)
        .await
        .map_err(redis_down)?
        .is_none()
    {
        return Err(not_ours());
    }
    if for_queue
        .queue
        .as_deref()
        .is_some_and(|q| q != queue.as_str())
    {
        return Err(other_queue());
    }
    let cap_ms = claims.exp.saturating_mul(1000);
    if cap_ms <= now_ms() {
        return Err(ended_error());
    }
    if let Some(cnf) = cnf {
        crate::session_proof::require(st, &queue, place, token, &cnf.jkt, headers).await?;
    }
    Ok(Bearer {
        queue,
        place,
        session: claims.jti,
        cap_ms,
    })
}

/// `GET /api/session`: `200` while the session is active, `410` once it has ended.
#[utoipa::path(
    get,
    path = "/api/session",
    tag = "sessions",
    security(("entry_token" = [])),
    params(ForQueue, ProofHeaders),
    responses(
        (status = 200, description = "The session is active (`Cache-Control: no-store`). Also a door token (the open door, `on_outage: \"open\"`) inside its window, answered without Redis: `session` is its `jti`, `expires_at` its `exp`.", body = SessionView),
        (status = 401, description = "Not an entry token this dispatcher's keys signed, or it names no session of a configured queue; or a token bound to the browser's key (`cnf.jkt`) without a good proof of it: `proof_required: <reason>`, `missing` (no `DPoP`), `invalid` (not an ES256 proof, a bad signature, `X-Original-Method`/`X-Original-URL` absent, or made for another request or token), `expired` (`iat` more than 60 s away), `replayed` (its `jti` was used already) or `wrong_key` (signed by another key than `cnf.jkt`); the session is left as it was.", body = ErrorBody),
        (status = 400, description = "A query that cannot be read (e.g. `queue` given twice).", body = ErrorBody),
        (status = 403, description = "The token admits to another queue than `?queue=`.", body = ErrorBody),
        (status = 429, description = "A bound token's session sent proofs faster than a booking page does (60 at once, then 5 a second, per dispatcher): nothing was spent; try again after `Retry-After`.", body = ErrorBody),
        (status = 503, description = "Redis is unreachable.", body = ErrorBody),
        (status = 410, description = "The session has ended (released or expired), or the token is past its `exp`; a door token outside its window.", body = ErrorBody),
    ),
)]
async fn status(
    State(st): State<AppState>,
    q: Result<Query<ForQueue>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let q = for_queue(q)?;
    if let Some(door) = door_answer(&st, &headers, &q)? {
        return Ok(door);
    }
    let b = bearer(&st, &headers, &q).await?;
    let s = st
        .store
        .session(&b.queue, b.place, now_ms())
        .await
        .map_err(redis_down)?;
    active(&b, s)
}

/// `POST /api/session/touch`: a sliding session is extended (never past the token's cap);
/// `200` with the expiry, `410` once the session has ended.
#[utoipa::path(
    post,
    path = "/api/session/touch",
    tag = "sessions",
    security(("entry_token" = [])),
    params(ForQueue, ProofHeaders),
    responses(
        (status = 200, description = "Touched: a sliding session now expires at min(now + TTL, the token's cap); another keeps its expiry. A door token inside its window: its `exp`, without Redis.", body = SessionView),
        (status = 401, description = "Not an entry token this dispatcher's keys signed, or it names no session of a configured queue; or a token bound to the browser's key (`cnf.jkt`) without a good proof of it: `proof_required: <reason>`, `missing` (no `DPoP`), `invalid` (not an ES256 proof, a bad signature, `X-Original-Method`/`X-Original-URL` absent, or made for another request or token), `expired` (`iat` more than 60 s away), `replayed` (its `jti` was used already) or `wrong_key` (signed by another key than `cnf.jkt`); the session is left as it was.", body = ErrorBody),
        (status = 400, description = "A query that cannot be read (e.g. `queue` given twice).", body = ErrorBody),
        (status = 403, description = "The token admits to another queue than `?queue=`.", body = ErrorBody),
        (status = 429, description = "A bound token's session sent proofs faster than a booking page does (60 at once, then 5 a second, per dispatcher): nothing was spent; try again after `Retry-After`.", body = ErrorBody),
        (status = 503, description = "Redis is unreachable.", body = ErrorBody),
        (status = 410, description = "The session has ended.", body = ErrorBody),
    ),
)]
async fn touch(
    State(st): State<AppState>,
    q: Result<Query<ForQueue>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let q = for_queue(q)?;
    if let Some(door) = door_answer(&st, &headers, &q)? {
        return Ok(door);
    }
    let b = bearer(&st, &headers, &q).await?;
    let s = st
        .store
        .touch_session(&b.queue, b.place, now_ms(), b.cap_ms)
        .await
        .map_err(redis_down)?;
    active(&b, s)
}

fn active(b: &Bearer, s: SessionState) -> Result<Response, ApiError> {
    match s {
        SessionState::Active { expires_at_ms } => {
            Ok(([(header::CACHE_CONTROL, "no-store")], b.view(expires_at_ms)).into_response())
        }
        SessionState::Ended => Err(ended_error()),
    }
}

/// `POST /api/session/consume`: ends the session at once, freeing its slot, and says whether
/// this call ended it: `200` with the session for exactly one call, `410` for every other one
/// (concurrent or later), so a booking service books only on `200` and one admission books
/// once.
#[utoipa::path(
    post,
    path = "/api/session/consume",
    tag = "sessions",
    security(("entry_token" = [])),
    params(ForQueue, ProofHeaders),
    responses(
        (status = 200, description = "This call ended the active session (book now): its slot is free, a resume of its place gets `closed` `session_ended`, and every other consume gets `410`. `expires_at` is when it would have ended. A door token inside its window gets `200` every time, without Redis, and nothing is recorded: it is a bearer pass for its window, not single-use.", body = SessionView),
        (status = 401, description = "Not an entry token this dispatcher's keys signed, or it names no session of a configured queue; or a token bound to the browser's key (`cnf.jkt`) without a good proof of it: `proof_required: <reason>`, `missing` (no `DPoP`), `invalid` (not an ES256 proof, a bad signature, `X-Original-Method`/`X-Original-URL` absent, or made for another request or token), `expired` (`iat` more than 60 s away), `replayed` (its `jti` was used already) or `wrong_key` (signed by another key than `cnf.jkt`); the session is left as it was.", body = ErrorBody),
        (status = 400, description = "A query that cannot be read (e.g. `queue` given twice).", body = ErrorBody),
        (status = 403, description = "The token admits to another queue than `?queue=`; the session is left as it was.", body = ErrorBody),
        (status = 429, description = "A bound token's session sent proofs faster than a booking page does (60 at once, then 5 a second, per dispatcher): nothing was spent; try again after `Retry-After`.", body = ErrorBody),
        (status = 503, description = "Redis is unreachable.", body = ErrorBody),
        (status = 410, description = "The session had ended already: consumed or released by another call, expired, or the token is past its `exp`. Do not book.", body = ErrorBody),
    ),
)]
async fn consume(
    State(st): State<AppState>,
    q: Result<Query<ForQueue>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let q = for_queue(q)?;
    if let Some(door) = door_answer(&st, &headers, &q)? {
        return Ok(door);
    }
    let b = bearer(&st, &headers, &q).await?;
    let ended = st
        .store
        .consume_session(&b.queue, b.place, now_ms())
        .await
        .map_err(redis_down)?;
    match ended {
        SessionEnd::EndedNow { expires_at_ms } => {
            tracing::info!(queue = %b.queue, place = %b.place, "session consumed");
            Ok(([(header::CACHE_CONTROL, "no-store")], b.view(expires_at_ms)).into_response())
        }
        SessionEnd::AlreadyEnded => Err(ended_error()),
    }
}

/// `DELETE /api/session`: ends the session at once, freeing its slot; `204` every time.
#[utoipa::path(
    delete,
    path = "/api/session",
    tag = "sessions",
    security(("entry_token" = [])),
    params(ForQueue, ProofHeaders),
    responses(
        (status = 204, description = "The session has ended (idempotent): its slot is free, and a resume of its place gets `closed` `session_ended`."),
        (status = 401, description = "Not an entry token this dispatcher's keys signed, or it names no session of a configured queue; or a token bound to the browser's key (`cnf.jkt`) without a good proof of it: `proof_required: <reason>`, `missing` (no `DPoP`), `invalid` (not an ES256 proof, a bad signature, `X-Original-Method`/`X-Original-URL` absent, or made for another request or token), `expired` (`iat` more than 60 s away), `replayed` (its `jti` was used already) or `wrong_key` (signed by another key than `cnf.jkt`); the session is left as it was.", body = ErrorBody),
        (status = 400, description = "A query that cannot be read (e.g. `queue` given twice).", body = ErrorBody),
        (status = 403, description = "The token admits to another queue than `?queue=`.", body = ErrorBody),
        (status = 429, description = "A bound token's session sent proofs faster than a booking page does (60 at once, then 5 a second, per dispatcher): nothing was spent; try again after `Retry-After`.", body = ErrorBody),
        (status = 503, description = "Redis is unreachable.", body = ErrorBody),
    ),
)]
async fn release(
    State(st): State<AppState>,
    q: Result<Query<ForQueue>, QueryRejection>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let q = for_queue(q)?;
    if door_answer(&st, &headers, &q)?.is_some() {
        // A door token names no session: nothing to end.
        return Ok(StatusCode::NO_CONTENT);
    }
    let b = match bearer(&st, &headers, &q).await {
        Ok(b) => b,
        // Past its cap the session has ended anyway: releasing it again is a no-op.
        Err(e) if e.status == StatusCode::GONE => return Ok(StatusCode::NO_CONTENT),
        Err(e) => return Err(e),
    };
    let ended = st
        .store
        .end_session(&b.queue, b.place, now_ms())
        .await
        .map_err(redis_down)?;
    if matches!(ended, SessionEnd::EndedNow { .. }) {
        tracing::info!(queue = %b.queue, place = %b.place, "session released");
    }
    Ok(StatusCode::NO_CONTENT)
}
