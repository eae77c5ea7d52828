//! A queue's scheduled sale in the admin API: `"opens_at"` in `PUT /admin/queues/{queue}`.
//!
//! Setting a new time generates the draw's secret seed and publishes its commitment at once;
//! moving a pending sale keeps its seed; `null` unschedules a sale whose draw already ran (a
//! pending one cannot be: its pre-queue is waiting for the draw). The draw itself is
//! [`crate::admission`]'s (`admission/draw.rs`).

use serde::{Deserialize, Deserializer};
use usher_core::draw::Seed;
use usher_core::ids::QueueId;
use usher_core::store::{DrawPhase, Store};
use usher_core::time::{now_ms, parse_rfc3339_ms};
use usher_http::ApiError;

use crate::state::redis_down;

/// For `Option<Option<T>>` fields: a present `null` is `Some(None)`, an absent field `None`
/// (with `#[serde(default)]`).
pub(crate) fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// What a `PUT` does to the schedule, once checked.
#[derive(Debug)]
pub(crate) enum Scheduling {
    Unchanged,
    /// Open at this time (ms since the epoch).
    At(u64),
    Unscheduled,
}

/// Checks a `PUT`'s `opens_at` against the queue's current schedule.
pub(crate) async fn check(
    store: &Store,
    q: &QueueId,
    opens_at: Option<&Option<String>>,
) -> Result<Scheduling, ApiError> {
    let Some(asked) = opens_at else {
        return Ok(Scheduling::Unchanged);
    };
    let current = store.schedule_of(q).await.map_err(redis_down)?;
    let Some(text) = asked else {
        return match current {
            Some(s) if s.phase == DrawPhase::Pending => Err(ApiError::bad_request(
                "opens_at cannot be removed while its draw is pending: people wait in its \
                 pre-queue (set an earlier opens_at to draw sooner)",
            )),
            Some(_) => Ok(Scheduling::Unscheduled),
            None => Ok(Scheduling::Unchanged),
        };
    };
    let at = parse_rfc3339_ms(text).ok_or_else(|| {
        ApiError::bad_request(format!(
            "opens_at must be an RFC 3339 time such as \"2030-01-31T18:00:00Z\", not {text:?}"
        ))
    })?;
    if current.as_ref().is_some_and(|s| s.opens_at_ms == at) {
        return Ok(Scheduling::Unchanged);
    }
    if at <= now_ms() {
        return Err(ApiError::bad_request(format!(
            "opens_at ({text}) must be in the future"
        )));
    }
    Ok(Scheduling::At(at))
}

/// Applies a checked schedule. A new sale gets a fresh seed (only its commitment is shown
/// before the draw); a pending one keeps its own.
pub(crate) async fn apply(store: &Store, q: &QueueId, s: Scheduling) -> Result<(), ApiError> {
    let at = match s {
        Scheduling::Unchanged => return Ok(()),
        Scheduling::At(at) => Some(at),
        Scheduling::Unscheduled => None,
    };
    if store
        .schedule(q, at, &Seed::generate())
        .await
        .map_err(redis_down)?
    {
        tracing::info!(queue = %q, opens_at_ms = ?at, "sale scheduled");
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "opens_at cannot be removed while its draw is pending",
        ))
    }
}
