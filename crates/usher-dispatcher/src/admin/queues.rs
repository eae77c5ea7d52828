//! The admin API's queue handlers: list, get, put, close, notice. [`super::routes`] serves
//! them, described by [`super::openapi`]; the body they take is [`super::queue_update`], the
//! queue they show [`super::queue_view`].

use axum::extract::rejection::JsonRejection;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use usher_core::ids::QueueId;
use usher_core::messages::{check_notice, CloseReason, StreamMessage};
use usher_core::store::{QueueConfig, VersionedWrite};
use usher_core::time::now_ms;
use usher_http::ApiError;

use super::edits;
use super::queue_update::{configured, QueueUpdate};
use super::queue_view::{view, QueueList, QueueView};
use crate::state::redis_down;
use crate::state::AppState;

fn parse_queue(raw: &str) -> Result<QueueId, ApiError> {
    QueueId::new(raw).map_err(|e| ApiError::bad_request(e.to_string()))
}
pub(crate) async fn list_queues(State(st): State<AppState>) -> Result<Json<QueueList>, ApiError> {
    let mut queues = Vec::new();
    for q in st.store.queue_ids().await.map_err(redis_down)? {
        if let Some(v) = view(&st, q).await? {
            queues.push(v);
        }
    }
    Ok(Json(QueueList { queues }))
}

pub(crate) async fn get_queue(
    State(st): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let q = parse_queue(&raw)?;
    let v = view(&st, q)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no queue {raw:?}")))?;
    Ok((StatusCode::OK, edits::etag(&v.config), Json(v)).into_response())
}
/// `409` when a change switches `bind` on while places wait: they joined without a browser
/// key, and a binding queue admits no place without one (`tick.lua` drops it at the head), so
/// switching on would cost each of them its place. Not a `confirm`: nobody can mean that.
/// (A join in the instant between this check and the write joins without a key too: switch
/// on while the queue is paused or before it opens.)
async fn bind_switch(
    st: &AppState,
    q: &QueueId,
    before: Option<&QueueConfig>,
    after: &QueueConfig,
) -> Result<(), ApiError> {
    if !before.is_some_and(|b| !b.bind.binds() && after.bind.binds()) {
        return Ok(());
    }
    let stats = st
        .store
        .queue_stats(q, now_ms())
        .await
        .map_err(redis_down)?;
    let places = stats.waiting + stats.entrants;
    if places > 0 {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "bind can be switched on only while nobody waits: the {places} places of this \
                 queue joined without a browser key, and a binding queue admits no place \
                 without one (switch it on before the sale, or once the line is empty)"
            ),
        ));
    }
    Ok(())
}

// A span per change (never its body or credentials: `skip_all`).
#[tracing::instrument(name = "admin", skip_all, fields(action = "put_queue", queue = %raw))]
pub(crate) async fn put_queue(
    State(st): State<AppState>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    body: Result<Json<QueueUpdate>, JsonRejection>,
) -> Result<Response, ApiError> {
    let q = parse_queue(&raw)?;
    let Json(u) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let if_match = edits::if_match(&headers)?;
    let page = u.page_settings(st.store.page_settings(&q).await.map_err(redis_down)?)?;
    let existing = st.store.queue_config(&q).await.map_err(redis_down)?;
    // Refused before anything is changed when the editor's version is already stale; the
    // write below checks it again, atomically.
    let mut expected = edits::expected_version(if_match, existing.as_ref())?;
    let scheduling =
        super::sale::check(&st.store, &q, u.opens_at.as_ref(), u.draw_seed.as_ref()).await?;
    let created = existing.is_none();
    let existing_open = existing.as_ref().is_some_and(|c| c.open);
    let before = existing.clone();
    let cfg = configured(existing, &u)?;
    bind_switch(&st, &q, before.as_ref(), &cfg).await?;
    let lanes = super::lanes::check(
        &st.store,
        &q,
        &super::lanes::LaneChange {
            lanes: u.lanes.as_deref(),
            default_lane: u.default_lane.as_ref(),
            schedules: matches!(scheduling, super::sale::Scheduling::At(..)),
        },
    )
    .await?;
    if u.confirm != Some(true) {
        let discards_draw = super::sale::discards_draw(&st.store, &q, &scheduling).await?;
        edits::unconfirmed(&st.store, &q, before.as_ref(), &cfg, discards_draw).await?;
    }
    let closing = !cfg.open && existing_open;
    // Lanes of an existing queue are written by their own script before the settings, so
    // they claim the version first too.
    let side_effects = !matches!(scheduling, super::sale::Scheduling::Unchanged)
        || u.draw_beacon.is_some()
        || closing
        || (lanes.is_some() && !created);
    if let (Some(v), true) = (expected, side_effects) {
        // The schedule and a close are written before the settings: the version is claimed
        // first, so an editor who lost the race changes none of them.
        edits::claim(&st.store, &q, v).await?;
        // The claim was this PUT's check: once the schedule or the close below is done, the
        // settings are written whatever the version has become since (a PUT without
        // `If-Match`, or a DELETE, may land in between), so a `412` never follows a change.
        expected = None;
    }
    // Lanes of an existing queue before anything else is written: a refusal (a lane with
    // places) changes nothing. A new queue's after its settings (it has no place yet).
    if let (Some(l), false) = (&lanes, created) {
        super::lanes::apply(&st.store, &q, l).await?;
    }
    // Before the settings: a new queue must not take joins into its line before its schedule.
    super::sale::apply(&st.store, &q, scheduling).await?;
    super::sale::apply_beacon(&st.store, &q, u.draw_beacon).await?;
    if closing {
        // `open: false` closes the queue exactly like DELETE does; before the settings are
        // written, so a close that failed leaves the queue open and a retry closes it (the
        // other way round, a retry would find the queue closed already and skip the close).
        let reason = match cfg.ended {
            Some(_) => CloseReason::Ended,
            None => CloseReason::QueueClosed,
        };
        close(&st, &q, reason, cfg.ended.clone()).await?;
    }
    if let VersionedWrite::Stale(now_at) = st
        .store
        .put_queue_if(&q, &cfg, expected)
        .await
        .map_err(redis_down)?
    {
        return Err(edits::stale(now_at));
    }
    st.store
        .put_page_settings(&q, &page)
        .await
        .map_err(redis_down)?;
    if let (Some(l), true) = (&lanes, created) {
        super::lanes::apply(&st.store, &q, l).await?;
    }
    let status = super::states::status_change(before.as_ref(), &cfg);
    let admits_more = before.is_none_or(|b| {
        (b.paused && !cfg.paused)
            || (!b.open && cfg.open)
            || cfg.admit_per_second > b.admit_per_second
            || cfg.max_active.unwrap_or(u64::MAX) > b.max_active.unwrap_or(u64::MAX)
            || (cfg.make_up_no_shows && !b.make_up_no_shows)
    });
    if admits_more && cfg.open && !cfg.paused {
        let _ = st.hints.send(q.clone());
    }
    if let Some((state, message)) = status {
        super::states::announce(&st, &q, state, message).await?;
    }
    tracing::info!(queue = %q, admit_per_second = cfg.admit_per_second, session_ttl_seconds = cfg.session_ttl_seconds, sliding_session = cfg.sliding_session, max_session_seconds = cfg.max_session_seconds, grace_seconds = cfg.grace_seconds, open = cfg.open, max_active = ?cfg.max_active, max_entrants = ?cfg.max_entrants, passthrough = cfg.passthrough, adaptive = cfg.adaptive.is_some(), challenge = cfg.challenge.as_str(), pow_difficulty = cfg.pow_difficulty, bind = cfg.bind.as_str(), arrival_seconds = ?cfg.arrival_seconds, make_up_no_shows = cfg.make_up_no_shows, on_outage = cfg.on_outage.as_str(), door_after_seconds = cfg.door_after_seconds, created, "queue configured");
    let v = view(&st, q)
        .await?
        .ok_or_else(|| ApiError::unavailable("queue vanished while being configured"))?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, edits::etag(&v.config), Json(v)).into_response())
}

/// `DELETE /admin/queues/{queue}` query: why the queue closes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloseQuery {
    pub reason: Option<String>,
}

/// The reasons an operator may close a queue for: `queue_closed` (the default) and
/// `sold_out`.
fn close_reason(q: Result<Query<CloseQuery>, QueryRejection>) -> Result<CloseReason, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::bad_request(e.body_text()))?;
    match q.reason.as_deref().map(str::parse) {
        None => Ok(CloseReason::QueueClosed),
        Some(Ok(r @ (CloseReason::QueueClosed | CloseReason::SoldOut))) => Ok(r),
        Some(_) => Err(ApiError::bad_request(
            "reason must be queue_closed or sold_out",
        )),
    }
}

// A span per change (never its body or credentials: `skip_all`).
#[tracing::instrument(name = "admin", skip_all, fields(action = "close_queue", queue = %raw))]
pub(crate) async fn close_queue(
    State(st): State<AppState>,
    Path(raw): Path<String>,
    query: Result<Query<CloseQuery>, QueryRejection>,
) -> Result<Json<QueueView>, ApiError> {
    let q = parse_queue(&raw)?;
    let reason = close_reason(query)?;
    if !close(&st, &q, reason, None).await? {
        return Err(ApiError::not_found(format!("no queue {raw:?}")));
    }
    view(&st, q)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no queue {raw:?}")))
}

/// Closes a queue for `reason` and tells every live gateway (cheap and rare), not only those
/// registered as holding browsers of it. `false` when the queue is unknown.
async fn close(
    st: &AppState,
    q: &QueueId,
    reason: CloseReason,
    message: Option<String>,
) -> Result<bool, ApiError> {
    if !st.store.close_queue(q, reason).await.map_err(redis_down)? {
        return Ok(false);
    }
    let live = st.store.live_gateways(now_ms()).await.map_err(redis_down)?;
    let msg = StreamMessage::Closed {
        queue: q.clone(),
        reason,
        message,
    };
    let batches: Vec<_> = live
        .into_values()
        .map(|id| (id, vec![msg.clone()]))
        .collect();
    // The queue is closed in Redis already; a gateway not told now (Redis out of memory, a
    // blip) learns it at its next heartbeat, so this failure fails nothing.
    if let Err(e) = st.store.send(&batches).await {
        let _ = redis_down(e);
        tracing::warn!(queue = %q, "queue closed; gateways learn it at their next heartbeat");
    }
    tracing::info!(queue = %q, %reason, gateways = batches.len(), "queue closed");
    Ok(true)
}

/// `POST /admin/queues/{queue}/notice` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NoticeBody {
    pub message: String,
}

/// `POST /admin/queues/{queue}/notice` answer: how many gateways the notice went to.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NoticeSent {
    pub queue: QueueId,
    pub gateways: usize,
}

/// Sends an operator's message to every browser waiting in the queue: one stream message to
/// each live gateway holding browsers of it (the gateways `state` goes to).
// A span per change (never its body or credentials: `skip_all`).
#[tracing::instrument(name = "admin", skip_all, fields(action = "notice", queue = %raw))]
pub(crate) async fn notice(
    State(st): State<AppState>,
    Path(raw): Path<String>,
    body: Result<Json<NoticeBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let q = parse_queue(&raw)?;
    let Json(b) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    check_notice(&b.message).map_err(|e| ApiError::bad_request(e.to_string()))?;
    if st
        .store
        .queue_config(&q)
        .await
        .map_err(redis_down)?
        .is_none()
    {
        return Err(ApiError::not_found(format!("no queue {raw:?}")));
    }
    let now = now_ms();
    let live = st.store.live_gateways(now).await.map_err(redis_down)?;
    let msg = StreamMessage::Notice {
        queue: q.clone(),
        message: b.message,
    };
    let batches: Vec<_> = st
        .store
        .queue_gateways(&q, now)
        .await
        .map_err(redis_down)?
        .into_iter()
        .filter_map(|idx| live.get(&idx).cloned())
        .map(|id| (id, vec![msg.clone()]))
        .collect();
    st.store.send(&batches).await.map_err(redis_down)?;
    tracing::info!(queue = %q, gateways = batches.len(), "notice sent");
    let sent = NoticeSent {
        queue: q,
        gateways: batches.len(),
    };
    Ok((StatusCode::ACCEPTED, Json(sent)).into_response())
}
