//! The no-show settings of `PUT /admin/queues/{q}` (`arrival_seconds`, `make_up_no_shows`):
//! checked and applied here, stored with the other settings, enforced by the tick
//! (`lua/tick.lua`), measured by the session API's first check of each session.

use usher_core::policy::MAX_ARRIVAL_SECONDS;
use usher_core::store::QueueConfig;
use usher_http::ApiError;

/// What a `PUT` body says of no-shows: absent fields keep their value.
pub(super) struct NoShowChange {
    /// Absent: unchanged; `Some(None)`: off.
    pub arrival_seconds: Option<Option<u64>>,
    pub make_up_no_shows: Option<bool>,
}

/// Applies `change` to `cfg` (after its session TTL is settled), refusing what makes no
/// sense: a deadline of 0 or past the session's TTL (the session would end first), and
/// making up for no-shows that are not measured.
pub(super) fn apply(cfg: &mut QueueConfig, change: NoShowChange) -> Result<(), ApiError> {
    if let Some(a) = change.arrival_seconds {
        cfg.arrival_seconds = a;
    }
    if let Some(m) = change.make_up_no_shows {
        cfg.make_up_no_shows = m;
    }
    if let Some(a) = cfg.arrival_seconds {
        let most = MAX_ARRIVAL_SECONDS.min(cfg.session_ttl_seconds);
        if !(1..=most).contains(&a) {
            return Err(ApiError::bad_request(format!(
                "arrival_seconds must be between 1 and {most} (at most session_ttl_seconds and {MAX_ARRIVAL_SECONDS}), or null for off"
            )));
        }
    }
    if cfg.make_up_no_shows && cfg.arrival_seconds.is_none() {
        return Err(ApiError::bad_request(
            "make_up_no_shows needs arrival_seconds: no-shows are measured against it",
        ));
    }
    Ok(())
}
