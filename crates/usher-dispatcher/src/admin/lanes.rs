//! The lane settings of `PUT /admin/queues/{q}` (`lanes`, `default_lane`; usher_core::lanes):
//! checked here, written by the store in one script that refuses to strand a place
//! (`lua/put_lanes.lua`), enforced by the tick (`lua/tick.lua`) and the join script.

use axum::http::StatusCode;
use usher_core::ids::QueueId;
use usher_core::lanes::{Lane, LaneName, Lanes};
use usher_core::store::{LanesWrite, Store};
use usher_http::ApiError;

use crate::state::redis_down;

/// What a `PUT` body says of lanes: absent fields keep their value.
pub(super) struct LaneChange<'a> {
    /// Absent: unchanged; `[]`: no lanes.
    pub lanes: Option<&'a [Lane]>,
    /// Absent: unchanged (the current default lane, or the first lane listed).
    pub default_lane: Option<&'a LaneName>,
    /// The `PUT` schedules a sale (`opens_at` set).
    pub schedules: bool,
}

/// The lanes `change` leaves `q` with (`None`: unchanged), checked: at most 8, unique
/// names, shares of 1..=100 adding up to 100, a default lane among them (400 otherwise);
/// and never together with a scheduled sale (409: the draw puts its pre-queue in line in
/// one random order, which has no lanes).
pub(super) async fn check(
    store: &Store,
    q: &QueueId,
    change: &LaneChange<'_>,
) -> Result<Option<Lanes>, ApiError> {
    let current = store.queue_lanes(q).await.map_err(redis_down)?;
    let wanted = match (change.lanes, change.default_lane) {
        (None, None) => None,
        // An absent `default_lane` keeps the current one while it is still listed (else the
        // first lane): a PUT that only changes shares never moves uninvited joins elsewhere.
        (Some(l), d) => {
            let kept = current
                .default_lane()
                .filter(|cur| l.iter().any(|lane| &lane.name == *cur));
            Some(Lanes::new(l.to_vec(), d.or(kept).cloned()))
        }
        (None, Some(d)) => Some(Lanes::new(current.lanes().to_vec(), Some(d.clone()))),
    };
    let wanted = wanted
        .transpose()
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let has_lanes = wanted
        .as_ref()
        .map_or(!current.is_empty(), |w| !w.is_empty());
    if has_lanes && change.schedules {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "lanes and opens_at cannot be combined: a scheduled sale's draw puts its \
             pre-queue in line in one random order, without lanes (remove the lanes, or \
             schedule the sale in a queue without them)",
        ));
    }
    Ok(wanted)
}

/// Writes `lanes` (from [`check`]); `409` when a lane removed (or made or unmade the
/// default lane) still has places in line, `409` while a scheduled sale's draw is pending.
pub(super) async fn apply(store: &Store, q: &QueueId, lanes: &Lanes) -> Result<(), ApiError> {
    match store.put_lanes(q, lanes).await.map_err(redis_down)? {
        LanesWrite::Written => Ok(()),
        LanesWrite::NotEmpty { lane, places } => Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "lane {lane:?} still has {places} places in line: a lane can be removed, or \
                 made or unmade the default lane, only once it is empty (its share can change \
                 at any time)"
            ),
        )),
        LanesWrite::Scheduled => Err(ApiError::new(
            StatusCode::CONFLICT,
            "lanes and opens_at cannot be combined: this queue's scheduled sale has not \
             drawn yet",
        )),
        LanesWrite::Unknown => Err(ApiError::not_found(format!("no queue {q:?}"))),
    }
}
