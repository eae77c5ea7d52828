//! What every HTTP handler of the dispatcher shares: the state they are served with, and how
//! a failed Redis call is answered. Its own module so that imports run one way: `admin`'s
//! router merges `sessions`' routes, and both take their state from here.

use std::sync::Arc;

use usher_core::ids::QueueId;
use usher_core::keyring::KeyRing;
use usher_core::store::{Store, StoreError};
use usher_http::ApiError;

#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    /// The published keys (the signing key first).
    pub keys: Arc<KeyRing>,
    pub admin_token: Option<Arc<str>>,
    /// Tells the admission loop that a queue can admit now (or faster), so it mints the next
    /// tick's tokens ahead of time.
    pub hints: tokio::sync::mpsc::UnboundedSender<QueueId>,
}

/// A Redis failure behind a request: logged, answered `503` (the client may retry).
pub(crate) fn redis_down(e: StoreError) -> ApiError {
    crate::metrics::redis_error();
    tracing::warn!(error = %e, "admin request failed on redis");
    ApiError::unavailable("redis is unavailable")
}
