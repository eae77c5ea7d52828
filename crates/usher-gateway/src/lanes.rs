//! Lanes (usher_core::lanes) at the gateway: which lane a join goes to, and what a join that
//! names a lane the queue does not have is told. Positions and ETAs per lane are the hub's
//! (`hub/line.rs` reads each place's lane's snapshot).
//!
//! The seam (issue 24): the lane comes from the shop's invitation (its `lane` claim), which
//! the lead wires to [`crate::joins::Join::lane`] where the invitation's join code is
//! redeemed. Until then a join's lane is `None` (the default lane), except on a gateway whose
//! [`Config::lanes_from_query`] is on (tests only; no flag): there the stream URL's `lane`
//! parameter names it.

use axum::http::StatusCode;
use usher_core::lanes::LaneName;
use usher_http::ApiError;

use crate::config::Config;
use crate::request::query_param;

/// The lane a stream request's join goes to (`None`: the queue's default lane). A malformed
/// name is refused (400) before Redis is asked anything.
pub(crate) fn lane_of_join(cfg: &Config, query: &str) -> Result<Option<LaneName>, ApiError> {
    if !cfg.lanes_from_query {
        return Ok(None);
    }
    query_param(query, "lane")?
        .map(LaneName::new)
        .transpose()
        .map_err(|e| ApiError::bad_request(e.to_string()))
}

/// A join named a lane its queue does not have: refused, and never retried (the page would
/// only ask again for the same lane).
pub(crate) fn no_such_lane(lane: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        format!("this queue has no lane {lane:?}"),
    )
}
