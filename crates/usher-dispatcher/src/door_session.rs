//! The session API's answer for a door token (`usher_core::door`): a browser let through a
//! gateway's open door while Redis was unreachable carries its window's door token, and the
//! booking service asks about it here like about any entry token. The dispatcher may be cut
//! off from Redis too, so a door token is judged **offline**: signed by a key of this
//! dispatcher's ring, for `?queue=` (when named), inside its window (`nbf`..`exp`). It names
//! no session, so there is nothing to look up, touch or end: `GET`, `touch` and `consume`
//! answer `200` with the window's end, `DELETE` answers `204`, and a consume records nothing
//! (a door token is a bearer pass for its window, shared by everyone let through in it:
//! docs/security.md says what that costs).

use axum::http::{header, HeaderMap, StatusCode};
use usher_core::ids::QueueId;
use usher_core::time::now_ms;
use usher_http::ApiError;

use crate::state::AppState;

/// A verified door token, good now.
pub(crate) struct DoorBearer {
    pub queue: QueueId,
    pub session: String,
    pub exp_ms: u64,
}

/// The bearer token as a door token: `Ok(None)` when it is not one (the caller goes on with
/// an entry token's checks); `401` for a door token of no configured shape, `403` for another
/// queue's, `410` outside its window.
pub(crate) fn door_bearer(
    st: &AppState,
    headers: &HeaderMap,
    for_queue: Option<&str>,
) -> Result<Option<DoorBearer>, ApiError> {
    let Some(token) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return Ok(None);
    };
    // Not a door token (an entry token, or no token of ours): the entry-token path judges it.
    let Ok(claims) = st.keys.verify_door(token) else {
        return Ok(None);
    };
    let queue = QueueId::new(&claims.aud)
        .map_err(|_| ApiError::unauthorized("the door token names no configured queue"))?;
    if claims.jti != format!("{queue}.door.{}", claims.door) {
        return Err(ApiError::unauthorized(
            "not a door token of this dispatcher",
        ));
    }
    if for_queue.is_some_and(|q| q != queue.as_str()) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "the entry token admits to another queue",
        ));
    }
    if !claims.within(now_ms() / 1000) {
        return Err(ApiError::new(
            StatusCode::GONE,
            "the door token is outside its window",
        ));
    }
    crate::metrics::door_session_check(&queue);
    Ok(Some(DoorBearer {
        queue,
        session: claims.jti,
        exp_ms: claims.exp.saturating_mul(1000),
    }))
}
