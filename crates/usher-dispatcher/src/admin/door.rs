//! The open door's settings of `PUT /admin/queues/{q}` (`on_outage`, `door_after_seconds`):
//! checked and applied here, stored with the other settings; the dispatcher's tick signs the
//! door tokens (`crate::tick::door`) and the gateways open the door (`usher_core::door`).

use axum::http::StatusCode;
use usher_core::door::{OnOutage, DOOR_AFTER_SECONDS};
use usher_core::store::QueueConfig;
use usher_http::ApiError;

/// What a `PUT` body says of the door: absent fields keep their value.
pub(super) struct DoorChange {
    pub on_outage: Option<OnOutage>,
    pub door_after_seconds: Option<u64>,
}

/// Applies `change` to `cfg` (after its `bind` is settled). Refused: a threshold out of
/// bounds (`400`), and an open door on a queue that binds places to the browser's key
/// (`409`, whichever of the two settings the change turns on): a door token is a bearer pass
/// that names no key, so it would let a copied token through the very queue that forbids it.
pub(super) fn apply(cfg: &mut QueueConfig, change: DoorChange) -> Result<(), ApiError> {
    if let Some(s) = change.door_after_seconds {
        if !DOOR_AFTER_SECONDS.contains(&s) {
            return Err(ApiError::bad_request(format!(
                "door_after_seconds must be between {} and {}",
                DOOR_AFTER_SECONDS.start(),
                DOOR_AFTER_SECONDS.end()
            )));
        }
        cfg.door_after_seconds = s;
    }
    if let Some(o) = change.on_outage {
        cfg.on_outage = o;
    }
    if cfg.on_outage == OnOutage::Open && cfg.bind.binds() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "on_outage \"open\" cannot be used with bind \"browser_key\": a door token names no \
             browser key, so the door would admit copies of it; use on_outage \"hold\", or bind \
             \"none\"",
        ));
    }
    Ok(())
}
