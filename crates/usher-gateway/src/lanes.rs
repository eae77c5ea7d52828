//! Lanes (usher_core::lanes) at the gateway: which lane a join goes to, and what a join that
//! names a lane the queue does not have is told. Positions and ETAs per lane are the hub's
//! (`hub/line.rs` reads each place's lane's snapshot).
//!
//! A join's lane is the shop's to say, never the browser's: the `lane` claim of its
//! invitation (`crate::invitation`), set on [`crate::joins::Join::lane`] where the join code
//! is redeemed (`stream::setup`); a join without one goes to the queue's default lane.

use axum::http::StatusCode;
use usher_http::ApiError;

/// A join named a lane its queue does not have: refused, and never retried (the page would
/// only ask again for the same lane).
pub(crate) fn no_such_lane(lane: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        format!("this queue has no lane {lane:?}"),
    )
}
