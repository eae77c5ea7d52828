//! The states a queue shows the people in its line, set in `PUT /admin/queues/{queue}`:
//! `maintenance` (with the operator's text) and `ended` (with the operator's text).
//!
//! * **maintenance** — admission holds (`paused` is on while it lasts), every place is kept,
//!   joins still take a place and wait, and every waiting browser hears `event: status` with
//!   the text at once; `"maintenance": null` ends it and resumes admission (unless the same
//!   request says `"paused": true`); `"paused": false` alone is refused while it lasts.
//! * **ended** — the queue closes like `open: false` does, with the reason `ended`: every
//!   waiting browser hears `closed` with the text, and later joins are refused. `open: true`
//!   reopens it and clears the text.
//!
//! Both texts follow the rules of a notice (`messages::check_notice`): 1–500 characters, no
//! control characters.

use usher_core::ids::QueueId;
use usher_core::messages::{check_notice, LineStatus, StreamMessage};
use usher_core::store::QueueConfig;
use usher_core::time::now_ms;
use usher_http::ApiError;

use crate::state::{redis_down, AppState};

/// The fields of a `PUT /admin/queues/{queue}` body (`queue_update::QueueUpdate`) the states read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StateChange<'a> {
    /// Absent: unchanged; a text: maintenance; `null`: maintenance ends.
    pub maintenance: Option<Option<&'a str>>,
    pub ended: Option<&'a str>,
    pub paused: Option<bool>,
    pub open: Option<bool>,
}

/// Refuses texts that break the notice rules, and requests that contradict themselves.
pub(crate) fn check(u: StateChange<'_>) -> Result<(), ApiError> {
    if let Some(Some(text)) = u.maintenance {
        check_notice(text).map_err(|e| ApiError::bad_request(format!("maintenance: {e}")))?;
        if u.paused == Some(false) {
            return Err(ApiError::bad_request(
                "maintenance holds admission: it cannot come with \"paused\": false",
            ));
        }
    }
    if let Some(text) = u.ended {
        check_notice(text).map_err(|e| ApiError::bad_request(format!("ended: {e}")))?;
        if u.open == Some(true) {
            return Err(ApiError::bad_request(
                "ended closes the queue: it cannot come with \"open\": true",
            ));
        }
    }
    Ok(())
}

/// Applies `u`'s states to `cfg` (after its other settings): maintenance pauses, and its end
/// resumes unless `paused` was given; ended closes; an explicit reopen clears ended. A queue
/// in maintenance stays paused: `"paused": false` alone is refused (end maintenance instead).
pub(crate) fn apply(cfg: &mut QueueConfig, u: StateChange<'_>) -> Result<(), ApiError> {
    match u.maintenance {
        Some(Some(text)) => {
            cfg.maintenance = Some(text.to_owned());
            cfg.paused = true;
        }
        Some(None) if cfg.maintenance.take().is_some() => {
            cfg.paused = u.paused.unwrap_or(false);
        }
        _ => {}
    }
    if cfg.maintenance.is_some() && !cfg.paused {
        return Err(ApiError::bad_request(
            "the queue is in maintenance, which holds admission: end it with \"maintenance\": null",
        ));
    }
    if let Some(text) = u.ended {
        cfg.ended = Some(text.to_owned());
        cfg.open = false;
    } else if u.open == Some(true) {
        cfg.ended = None;
    }
    Ok(())
}

/// The `status` message for a maintenance change from `before` to `after`, if it changed.
pub(crate) fn status_change(
    before: Option<&QueueConfig>,
    after: &QueueConfig,
) -> Option<(LineStatus, Option<String>)> {
    let was = before.and_then(|b| b.maintenance.as_ref());
    match (was, &after.maintenance) {
        (a, Some(text)) if a != Some(text) => Some((LineStatus::Maintenance, Some(text.clone()))),
        (Some(_), None) => Some((LineStatus::Open, None)),
        _ => None,
    }
}

/// Tells every live gateway (cheap and rare) that `q` went into or out of maintenance; each
/// passes `event: status` on to the browsers it holds. A gateway not told (a blip) leaves its
/// browsers as they were; a page loaded later reads the state from the queue's settings.
pub(crate) async fn announce(
    st: &AppState,
    q: &QueueId,
    state: LineStatus,
    message: Option<String>,
) -> Result<usize, ApiError> {
    let live = st.store.live_gateways(now_ms()).await.map_err(redis_down)?;
    let msg = StreamMessage::Status {
        queue: q.clone(),
        state,
        message,
    };
    let batches: Vec<_> = live
        .into_values()
        .map(|id| (id, vec![msg.clone()]))
        .collect();
    st.store.send(&batches).await.map_err(redis_down)?;
    Ok(batches.len())
}
